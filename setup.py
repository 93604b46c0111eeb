"""Ships what setup.cfg cannot: the start-up hook `pyserini_ext.pth` into site-packages, and the repository's
top-level `resources/` (shipped models, prebuilt-index catalogue) as package data `pyserini_ext/resources/`,
where `pyserini_ext.registry.resources_dir` finds it in an installed wheel."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
PTH = "pyserini_ext.pth"
RESOURCES = "resources"


class BuildPyWithStartupHookAndResources(build_py):
    def run(self):
        super().run()
        self.copy_file(os.path.join(ROOT, PTH), os.path.join(self.build_lib, PTH))
        self.copy_tree(os.path.join(ROOT, RESOURCES), self._resources_target())

    def _resources_target(self):
        return os.path.join(self.build_lib, "pyserini_ext", RESOURCES)

    def _resource_files(self):
        source = os.path.join(ROOT, RESOURCES)
        for folder, _, files in os.walk(source):
            for name in files:
                yield os.path.join(self._resources_target(), os.path.relpath(os.path.join(folder, name), source))

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH), *self._resource_files()]


setup(cmdclass={"build_py": BuildPyWithStartupHookAndResources})
