"""What every rank does with a config before LiBai reads it: one function, run by ``libai-ext-train``'s set-up and
again by ``ConsistentBatchTrainer`` for a project's own script, which has no such set-up (each step is idempotent)."""
from ..compat import fill_missing_config_keys
from ..config.key_guard import guard_config_keys
from .launcher import die_with_launcher
from .output_lock import claim_output_dir


def start_rank(cfg, *, claim_output=True):
    """End with the launcher, refuse a misspelt key (before any rank talks, so none hangs), fill in the keys this
    LiBai line lacks, and claim the output folder (before anything writes there).  Whether the rank is tied to its
    launcher."""
    tied_to_launcher = die_with_launcher()
    guard_config_keys(cfg)
    fill_missing_config_keys(cfg)
    if claim_output:
        claim_output_dir(cfg)
    return tied_to_launcher
