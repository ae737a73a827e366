"""sftbuild.validate stage, and the RLVR reward built on the same pipeline."""
from sftbuild.validate.reward import Reward, compute_score, reward, reward_batch, trl_reward  # noqa: F401
