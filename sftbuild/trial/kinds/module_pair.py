from sftbuild.trial.kinds import KINDS, Kind


@KINDS.register
class ModulePair(Kind):
    """A reference `Model` and a solution `ModelNew` (KernelBench style); the solution may build CUDA with
    load_inline."""
    name = "module_pair"
    version = 1
    languages = ("kernelbench",)
    runner = "sftbuild.trial.pyrun:run_python"
    interpreted = True

    def takes(self, binding, language):
        return binding.kind == "kernelbench"

    def builds_extension(self, task):
        return "load_inline" in task.code
