from sftbuild.trial.kinds import KINDS, Kind


@KINDS.register
class CudaExtensionFunction(Kind):
    """A CUDA kernel called through its file's own extension function (tensors in, tensors out), built as a
    torch extension."""
    name = "cuda_extension_function"
    version = 1
    languages = ("cuda",)
    runner = "sftbuild.trial.trials:run_record"
    build = "harness"

    def takes(self, binding, language):
        return binding.harness == "extension_function"
