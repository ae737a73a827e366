from sftbuild.trial.kinds import KINDS, Kind


@KINDS.register
class CudaFileReference(Kind):
    """A CUDA kernel called through its file's own host launcher and compared with the file's own CPU reference."""
    name = "cuda_file_reference"
    version = 1
    languages = ("cuda",)
    runner = "sftbuild.trial.trials:run_record"
    build = "harness"

    def takes(self, binding, language):
        return binding.how == "file_reference"
