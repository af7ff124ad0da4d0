"""A forward that combines two pipeline stages' tensors, named instead of OneFlow's bare placement error.

LiBai places each layer on its ``layer_idx``'s stage (stage 0 without one) and moves tensors between stages only in
its own blocks, so a model that feeds one stage's output into another stage's layer or op fails at its first forward
under pipeline parallelism with "Expected all tensors to be on the same placement" (LiBai main's MoCo v3 and MAE:
docs/upstream-bugs.md #27). Only the forward shows where stages mix: every rank raises the same error there, before
any optimizer step, and ``explain_mixed_stages`` turns it into ``StagesMixed``, naming the running module, the
placements and the layouts that can work.
"""
MIXED_PLACEMENTS = "found at least two placements"


class StagesMixed(RuntimeError):
    """The model's forward combined tensors of two pipeline stages."""


def innermost_module(traceback, model):
    """``(name, module)`` of the innermost module of ``model`` whose ``forward`` the traceback passes through."""
    names = {id(module): name for name, module in model.named_modules()}
    found = None
    while traceback is not None:
        owner = traceback.tb_frame.f_locals.get("self")
        if owner is not None and id(owner) in names:
            found = names[id(owner)] or "(the model)", owner
        traceback = traceback.tb_next
    return found


def explain_mixed_stages(error, model, pipeline_parallel_size):
    """A ``StagesMixed`` for OneFlow's placement error under pipeline parallelism, else None."""
    if pipeline_parallel_size <= 1 or MIXED_PLACEMENTS not in str(error):
        return None
    where = innermost_module(error.__traceback__, model)
    module = f" in {where[0]} ({type(where[1]).__name__})" if where else ""
    placements = str(error).split(MIXED_PLACEMENTS, 1)[1].strip(" ,\n").splitlines()[0].rstrip("!")
    return StagesMixed(
        f"the model's forward combines tensors of two pipeline stages{module} ({placements}). LiBai puts a layer on the "  # noqa: E501
        f"stage of its layer_idx (stage 0 without one) and moves nothing between stages that its own blocks do not, "
        f"so this model cannot run with train.dist.pipeline_parallel_size={pipeline_parallel_size}; layouts with "
        f"pipeline_parallel_size=1 (data and tensor parallelism) can. LiBai main's projects MOCOV3 and MAE do this "
        f"(libai_ext's docs/upstream-bugs.md, 'LiBai's projects under pipeline parallelism')")
