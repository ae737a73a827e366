from sftbuild.trial.kinds import KINDS, Kind


@KINDS.register
class InductorProgram(Kind):
    """One Inductor-generated Triton kernel, run inside its program (the output code, this kernel spliced in)
    against the eager graph."""
    name = "inductor_program"
    version = 1
    languages = ("triton",)
    runner = "sftbuild.trial.pyrun:run_python"

    def takes(self, binding, language):
        return binding.kind == "inductor"
