from sftbuild.describe.describers import DESCRIBERS, Describer


@DESCRIBERS.register
class CooperativeGroups(Describer):
    """Cooperative groups: thread-block, grid or tiled-partition handles."""
    name = "cooperative_groups"
    version = 1
    phrase = {"en": "cooperative groups", "zh": "cooperative groups"}
    claim = r"cooperative groups"

    def cuda(self, s):
        return s.has("cooperative_groups", "this_thread_block", "this_grid", "tiled_partition")
