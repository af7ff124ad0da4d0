"""Helpers for running and checking real multi-rank OneFlow jobs (tools, benchmarks, tests), and the fault hook
the tests install (``fault_injection``).  May import anything of libai_ext; the runtime never imports it."""
from ..engine.raw_losses import raw_losses_by_run, read_raw_losses
from .multirank import LaunchResult, MultiRankError, launch, pin_to_device, ranks_device, write_rank_result

__all__ = ["LaunchResult", "MultiRankError", "launch", "pin_to_device", "ranks_device", "raw_losses_by_run",
           "read_raw_losses", "write_rank_result"]
