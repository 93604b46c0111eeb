"""Only here to ship `pyserini_ext.pth`, the start-up hook, into site-packages (setup.cfg cannot)."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "pyserini_ext.pth"


class BuildPyWithStartupHook(build_py):
    def run(self):
        super().run()
        self.copy_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), PTH),
                       os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": BuildPyWithStartupHook})
