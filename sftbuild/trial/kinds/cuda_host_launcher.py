from sftbuild.trial.kinds import KINDS, Kind


@KINDS.register
class CudaHostLauncher(Kind):
    """A CUDA kernel called through its file's own host launcher, with the pointers and sizes its probe mapped."""
    name = "cuda_host_launcher"
    version = 1
    languages = ("cuda",)
    runner = "sftbuild.trial.trials:run_record"
    build = "harness"

    def takes(self, binding, language):
        return binding.harness == "host_launcher"
