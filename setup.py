"""Builds the JVM bridge jar into the package (``sparkdl/jars/sparkdl-bridge.jar``) on every install, editable
install and wheel; the rest of the metadata is in setup.cfg. See jvm_bridge/build.py."""
import importlib.util
import os

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("sparkdl_jvm_bridge_build", os.path.join(ROOT, "jvm_bridge", "build.py"))
_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_build)


class BuildPyWithJar(build_py):
    """``build_py`` that also compiles the bridge: into the build directory for wheels, into the source tree
    for editable installs (which import the package from there)."""

    def run(self):
        super().run()
        base = ROOT if self.editable_mode else self.build_lib
        _build.build_jar(os.path.join(base, "sparkdl", "jars"))


setup(cmdclass={"build_py": BuildPyWithJar})
