"""Build ``sparkdl-bridge.jar`` from ``jvm_bridge/src/main/java`` with ``javac --release 17`` against the jars the
installed pyspark ships (``pyspark/jars/*.jar``). ``setup.py`` calls :func:`build_jar` for every install and wheel;
by hand (e.g. after editing a Java file in an editable checkout)::

    python jvm_bridge/build.py            # writes sparkdl/jars/sparkdl-bridge.jar

Needs a JDK (``javac``, Java 17 or newer) on ``PATH`` or under ``$JAVA_HOME``; a wheel built here needs only Java.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

__all__ = ["JAR_NAME", "build_jar", "find_javac", "pyspark_jars_dir", "sources_digest"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = os.path.join(ROOT, "jvm_bridge", "src", "main", "java")
JAR_NAME = "sparkdl-bridge.jar"
PROPERTIES = "org/sparkdl/bridge/bridge.properties"


class BuildError(RuntimeError):
    """The bridge jar cannot be built (missing JDK or pyspark, or a compile error)."""


def find_javac() -> str:
    """Path of ``javac``: ``$JAVA_HOME/bin/javac`` if it exists, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    candidates = [os.path.join(home, "bin", "javac")] if home else []
    candidates.append(shutil.which("javac"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise BuildError(
        "Building sparkdl from source needs a JDK 17 or newer: 'javac' was found neither in $JAVA_HOME/bin nor on "
        "PATH. Install one (e.g. 'apt-get install openjdk-17-jdk-headless', or a Temurin 17 JDK) and set JAVA_HOME, "
        "or install a prebuilt sparkdl wheel, which needs only Java.")


def pyspark_jars_dir() -> str:
    """``pyspark/jars`` of the pyspark importable here (the build environment's, under pip)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise BuildError("Building sparkdl's JVM bridge needs pyspark (its jars are the compile class path); pip "
                         "installs it into the build environment from pyproject.toml. Without build isolation, "
                         "'pip install \"pyspark>=4.1,<5\"' first.")
    jars = os.path.join(list(spec.submodule_search_locations)[0], "jars")
    if not os.path.isdir(jars) or not any(f.endswith(".jar") for f in os.listdir(jars)):
        raise BuildError(f"pyspark at {os.path.dirname(jars)} has no jars/ directory (a pyspark-client or "
                         "pyspark-connect install?); the bridge is compiled against the full pyspark package")
    return jars


def sparkdl_version() -> str:
    """``__version__`` from ``sparkdl/__init__.py`` (read, not imported: the build has no numba)."""
    with open(os.path.join(ROOT, "sparkdl", "__init__.py"), encoding="utf-8") as f:
        match = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', f.read(), re.M)
    if match is None:
        raise BuildError("sparkdl/__init__.py defines no __version__")
    return match.group(1)


def _sources(root: str = SOURCES) -> list[str]:
    found = []
    for base, _, files in os.walk(root):
        found += [os.path.join(base, f) for f in files if f.endswith(".java")]
    return sorted(found)


def sources_digest(root: str = SOURCES) -> str:
    """SHA-256 (hex) of the Java sources under ``root``: their paths relative to it and their bytes. Written into
    the jar (``sources=`` in its properties), so that a source checkout can tell a jar built from other sources
    (:func:`sparkdl.jvm.bridge` refuses it) although the sparkdl version is the same. It does not cover the pyspark
    jars compiled against: an upgraded pyspark is noticed by a fresh install (``pip install -e .``) only."""
    import hashlib
    h = hashlib.sha256()
    for path in _sources(root):
        with open(path, "rb") as f:
            data = f.read()
        rel = os.path.relpath(path, root).replace(os.sep, "/").encode()
        h.update(len(rel).to_bytes(4, "little") + rel + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def build_jar(out_dir: str) -> str:
    """Compile the bridge and write ``out_dir/sparkdl-bridge.jar``; returns its path.

    Raises
    ------
    BuildError
        Without a JDK, without pyspark's jars, or when javac fails (its output is in the message).
    """
    javac = find_javac()
    classpath = os.path.join(pyspark_jars_dir(), "*")
    version = sparkdl_version()
    digest = sources_digest()  # before compiling: an edit during the build must not pass as built
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sparkdl-bridge-") as classes:
        cmd = [javac, "--release", "17", "-nowarn", "-encoding", "UTF-8", "-cp", classpath, "-d", classes, *_sources()]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError(f"javac failed ({' '.join(cmd[:6])} ...):\n{done.stdout}{done.stderr}\n"
                             "The bridge needs javac from a JDK 17 or newer (check 'javac -version').")
        jar = os.path.join(out_dir, JAR_NAME)
        tmp = jar + ".tmp"
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nImplementation-Title: sparkdl-bridge\r\n"
                                               f"Implementation-Version: {version}\r\n\r\n")
            z.writestr(PROPERTIES, f"version={version}\nsources={digest}\n")
            for base, _, files in os.walk(classes):
                for f in sorted(files):
                    path = os.path.join(base, f)
                    z.write(path, os.path.relpath(path, classes).replace(os.sep, "/"))
        os.replace(tmp, jar)
    return jar


if __name__ == "__main__":
    try:
        print(build_jar(os.path.join(ROOT, "sparkdl", "jars")))
    except BuildError as e:
        sys.exit(f"error: {e}")
