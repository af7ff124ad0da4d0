"""Helpers for running and checking real multi-rank OneFlow jobs (tests, tools, benchmarks)."""
from .multirank import LaunchResult, MultiRankError, launch, pin_to_device, ranks_device, write_rank_result

__all__ = ["LaunchResult", "MultiRankError", "launch", "pin_to_device", "ranks_device", "write_rank_result"]
