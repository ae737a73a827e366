from sftbuild.trial.kinds import KINDS, Kind


@KINDS.register
class TritonOp(Kind):
    """A Triton module checked against a registry op through its entry point; the interpreter runs it without a GPU."""
    name = "triton_op"
    version = 1
    languages = ("triton",)
    runner = "sftbuild.trial.pyrun:run_python"
    interpreted = True

    def takes(self, binding, language):
        return binding.kind == "op"
