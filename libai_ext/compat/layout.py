"""LiBai's layer -> stage -> placement layout, read the same way on every line.

0.1.1 splits ``pipeline_num_layers`` uniformly over the stages; main gives middle stages more layers when pp >= 4 (and
honours ``train.dist.custom_pipeline_stage_id``). Both keep the result in ``dist_util._layer_stage_ids`` (no public
getter), read here instead of assuming a uniform split.
"""
import oneflow as flow

from libai.utils import distributed as dist


def layer_stage_ids():
    """The pipeline stage of every LiBai layer index ``0 .. pipeline_num_layers - 1``."""
    return list(dist.get_dist_util()._layer_stage_ids)


def first_layer_of_stage(stage, stage_ids=None):
    """The smallest layer index that LiBai places on ``stage``."""
    stage_ids = layer_stage_ids() if stage_ids is None else stage_ids
    if stage not in stage_ids:
        raise ValueError(f"pipeline stage {stage} holds no layer (layer stages: {stage_ids})")
    return stage_ids.index(stage)


def resolve_device_type(requested, layout_device_type, cuda_available):
    """The device kind inputs are placed on.

    ``None`` (0.1.1 has no such setting) means the layout's own. A requested ``"cuda"`` on a host without CUDA becomes
    ``"cpu"``, as LiBai main's ``get_layer_placement`` does for every placement."""
    if requested is None:
        return layout_device_type
    if requested == "cuda" and not cuda_available:
        return "cpu"
    return requested


def layer_placement(layer_idx, device_type=None):
    """``dist.get_layer_placement(layer_idx)`` on ``device_type`` (default: the layout's)."""
    placement = dist.get_layer_placement(layer_idx)
    device_type = resolve_device_type(device_type, placement.type, flow.cuda.is_available())
    if device_type == placement.type:
        return placement
    return flow.placement(device_type, placement.ranks.tolist())


def layout_coordinates(rank):
    """``(stage, data-parallel index, tensor-parallel index)`` of ``rank`` in LiBai's layout.

    LiBai lays stage ``s`` over ranks ``[s*n, (s+1)*n)`` (``n = dp * tp``) as a
    ``(dp, tp)`` grid, so a rank's shard of an ``S(0)`` batch is ``(rank % n) // tp``.
    """
    util = dist.get_dist_util()
    per_stage = util.world_size // util.pipeline_parallel_size
    tp = util.tensor_parallel_size
    return rank // per_stage, (rank % per_stage) // tp, rank % tp


def placement_data_parallel_rank():
    """This rank's index along the data-parallel axis of its stage's placement.

    LiBai's ``get_data_parallel_rank()`` returns ``rank // (tp * pp)`` instead (0.1.1; main takes that modulo dp): under
    pipeline parallelism two shards of stage 0 then read the same samples."""
    return layout_coordinates(flow.env.get_rank())[1]


def parallel_layout():
    """``{"dp": .., "tp": .., "pp": ..}`` of this run."""
    util = dist.get_dist_util()
    return {"dp": util.data_parallel_size, "tp": util.tensor_parallel_size, "pp": util.pipeline_parallel_size}


def stage_placements():
    """``{stage id: placement}`` of every pipeline stage of LiBai's layout."""
    placements = {}
    for layer_idx, stage in enumerate(layer_stage_ids()):
        placements.setdefault(stage, dist.get_layer_placement(layer_idx))
    return placements
