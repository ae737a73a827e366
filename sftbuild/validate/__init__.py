"""sftbuild.validate stage, and the RLVR reward built on the same pipeline."""
from sftbuild.validate.reward import (  # noqa: F401
    Reward, compute_score, compute_score_batch, reward, reward_batch, trl_reward)
