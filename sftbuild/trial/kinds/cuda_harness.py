from sftbuild.trial.kinds import KINDS, Kind

SPECIAL = ("file_reference", "host_launcher", "extension_function")  # harnesses with kinds of their own


@KINDS.register
class CudaHarness(Kind):
    """A CUDA kernel bound to a registry op, launched by a rendered harness (trial/templates) around its
    unchanged code."""
    name = "cuda_harness"
    version = 1
    order = 110  # asked after the CUDA kinds that name their harness
    languages = ("cuda",)
    runner = "sftbuild.trial.trials:run_record"
    build = "harness"

    def takes(self, binding, language):
        return binding.harness not in SPECIAL and binding.how != "file_reference"
