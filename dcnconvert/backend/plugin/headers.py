"""TensorRT's public C++ headers for ``dcnconvert plugin build``: found on this machine, or fetched once.

The plugin compiles against ``NvInfer.h`` and its siblings of the TensorRT major version that will
load it (a library built on the headers of another major registers nothing, see
:mod:`dcnconvert.backend.plugin.library`). Most machines with a pip-installed TensorRT have no headers at all,
so :func:`find_headers` looks, in order, at

1. ``--headers DIR``: used as given (it must hold ``NvInfer.h`` of the right major);
2. the usual install places (``$TENSORRT_INCLUDE_DIR``, ``$TRT_ROOT/include``, the system folders of
   :data:`SYSTEM_HEADER_DIRS`, ``$CONDA_PREFIX/include``), keeping the first of the right major;
3. headers fetched before, in ``<cache>/headers/<tag>/include``;
4. the ``include/`` folder of the TensorRT OSS repository at the release's tag (:func:`tag_candidates`),
   from :data:`DEFAULT_SOURCE` or the source given by ``--headers-source`` / ``$DCNCONVERT_HEADERS_SOURCE``:
   a URL template with ``{tag}`` (a ``.tar.gz`` of the repository, ``file://`` works too), a local git
   clone (``git archive``) or a folder holding ``<tag>/include`` or ``include/``.

Fetched headers are stored atomically (a temporary folder renamed into place), so a half-written
folder is never taken for headers.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from dcnconvert import log
from dcnconvert.backend.plugin import library as plugin_lib
from dcnconvert.backend.trt.versions import version_tuple
from dcnconvert.errors import MissingDependencyError, UsageError

__all__ = ["DEFAULT_SOURCE", "SOURCE_ENV_VAR", "SYSTEM_HEADER_DIRS", "Headers", "fetch_headers",
           "find_headers", "header_version", "headers_cache", "tag_candidates"]

#: The TensorRT OSS repository's tarball of one tag.
DEFAULT_SOURCE = "https://github.com/NVIDIA/TensorRT/archive/refs/tags/{tag}.tar.gz"
SOURCE_ENV_VAR = "DCNCONVERT_HEADERS_SOURCE"
#: Where TensorRT's packages put the headers (the same list as plugin_src/trt/plugin.mk).
SYSTEM_HEADER_DIRS: tuple[str, ...] = ("/usr/include/x86_64-linux-gnu", "/usr/include/aarch64-linux-gnu",
                                       "/usr/include", "/usr/local/tensorrt/include", "/opt/tensorrt/include")
#: Seconds a download may wait for the server (per connection and per read).
FETCH_TIMEOUT_S = 60.0

_DEFINE_RE = re.compile(r"^\s*#\s*define\s+(\w+)\s+(\w+)", re.MULTILINE)


@dataclass(frozen=True)
class Headers:
    """A folder with ``NvInfer.h``, the TensorRT version its ``NvInferVersion.h`` states, and its origin."""

    include_dir: Path
    version: str
    origin: str


def header_version(include_dir: str | os.PathLike[str]) -> str | None:
    """``"major.minor.patch"`` from ``NvInferVersion.h`` (through the ``TRT_*_ENTERPRISE`` names of 10.6+),
    or ``None`` when the file is missing or says no version."""
    try:
        text = (Path(include_dir) / "NvInferVersion.h").read_text(errors="replace")
    except OSError:
        return None
    values = dict(_DEFINE_RE.findall(text))
    parts = []
    for name in ("NV_TENSORRT_MAJOR", "NV_TENSORRT_MINOR", "NV_TENSORRT_PATCH"):
        value = values.get(name, "")
        value = values.get(value, value)  # one level of indirection: NV_TENSORRT_MAJOR TRT_MAJOR_ENTERPRISE
        if not value.isdigit():
            return None if name != "NV_TENSORRT_PATCH" else ".".join(parts)
        parts.append(value)
    return ".".join(parts)


def tag_candidates(tensorrt_version: str) -> list[str]:
    """The OSS repository's tags that may hold ``tensorrt_version``'s headers, most specific first:
    ``vX.Y.Z``, ``vX.Y``, ``vX.Y.0`` (the repository has tags of each form: v10.3.0, v10.16, v10.13.2).

    Raises:
        UsageError: the version has no ``major.minor``.
    """
    parts = version_tuple(tensorrt_version)
    if len(parts) < 2:
        raise UsageError(f"TensorRT version {tensorrt_version!r} has no major.minor",
                         hint="give a version such as 10.16 or 10.16.1.11 (--tensorrt-version)")
    major, minor = parts[0], parts[1]
    tags = [f"v{major}.{minor}.{parts[2]}"] if len(parts) > 2 else []
    tags += [f"v{major}.{minor}", f"v{major}.{minor}.0"]
    return list(dict.fromkeys(tags))


def headers_cache() -> Path:
    """``<cache>/headers`` (absolute): fetched headers, one ``<tag>/include`` folder per tag."""
    return plugin_lib.cache_root().absolute() / "headers"


def _major(version: str | None) -> int | None:
    parts = version_tuple(version or "")
    return parts[0] if parts else None


def _local_candidates() -> Iterator[tuple[Path, str]]:
    for item in os.environ.get("TENSORRT_INCLUDE_DIR", "").split(os.pathsep):
        if item:
            yield Path(item), "$TENSORRT_INCLUDE_DIR"
    if os.environ.get("TRT_ROOT"):
        yield Path(os.environ["TRT_ROOT"]) / "include", "$TRT_ROOT/include"
    for item in SYSTEM_HEADER_DIRS:
        yield Path(item), "system"
    if os.environ.get("CONDA_PREFIX"):
        yield Path(os.environ["CONDA_PREFIX"]) / "include", "$CONDA_PREFIX/include"


def _local_headers(major: int, searched: list[str]) -> Headers | None:
    logger = log.get_logger(__name__)
    for folder, origin in _local_candidates():
        searched.append(str(folder))
        if not (folder / "NvInfer.h").is_file():
            continue
        version = header_version(folder)
        if _major(version) != major:
            said = f"TensorRT {version}" if version else "no readable version in NvInferVersion.h"
            logger.info("skipping the headers in %s (%s): %s, not TensorRT %d", folder, origin, said, major)
            continue
        return Headers(folder.resolve(), str(version), origin)
    return None


def find_headers(tensorrt_version: str, headers: str | os.PathLike[str] | None = None,
                 source: str | None = None) -> Headers:
    """The headers to build the plugin for TensorRT ``tensorrt_version`` with (see the module docstring).

    Raises:
        UsageError: ``headers`` lacks ``NvInfer.h`` or is of another major; a bad ``source``.
        MissingDependencyError: no headers here, none cached, and the fetch failed (offline, no such tag).
    """
    tags = tag_candidates(tensorrt_version)  # also checks the version
    major = version_tuple(tensorrt_version)[0]
    if headers is not None:
        folder = Path(headers).expanduser()
        if not (folder / "NvInfer.h").is_file():
            raise UsageError(f"--headers {folder}: no NvInfer.h in that folder",
                             hint="give the include/ folder of TensorRT (the one holding NvInfer.h)")
        version = header_version(folder)
        if _major(version) != major:
            raise UsageError(f"--headers {folder} holds TensorRT {version or '(unknown version)'} headers, "
                             f"but the plugin is built for TensorRT {tensorrt_version}: the library would "
                             "register nothing there",
                             hint=f"give the headers of TensorRT {major}, or drop --headers to fetch them")
        return Headers(folder.resolve(), str(version), "--headers")
    searched: list[str] = []
    found = _local_headers(major, searched)
    if found is not None:
        return found
    for tag in tags:
        include = headers_cache() / tag / "include"
        version = header_version(include) if (include / "NvInfer.h").is_file() else None
        if _major(version) == major:
            return Headers(include, str(version), f"cache ({tag})")
    return fetch_headers(tensorrt_version, source, searched)


# ----------------------------------------------------------------------------------------------
# fetching
# ----------------------------------------------------------------------------------------------


class _NotThere(Exception):
    """One tag is not in the source (try the next); other failures stop the search."""


def _extract_include(archive: tarfile.TarFile, dest: Path, strip: int) -> int:
    """Write the regular files under ``include/`` of ``archive`` (after ``strip`` leading folders) to
    ``dest/include``; returns how many. Links and paths leaving ``dest`` are skipped."""
    count = 0
    for member in archive:
        parts = PurePosixPath(member.name).parts[strip:]
        if not parts or parts[0] != "include" or ".." in parts or member.name.startswith("/"):
            continue
        target = dest.joinpath(*parts)
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
        elif member.isfile():
            target.parent.mkdir(parents=True, exist_ok=True)
            handle = archive.extractfile(member)
            if handle is not None:
                with handle, open(target, "wb") as out:
                    shutil.copyfileobj(handle, out)
                count += 1
    return count


def _from_url(template: str, tag: str, dest: Path) -> None:
    url = template.replace("{tag}", tag)
    log.get_logger(__name__).info("fetching TensorRT's headers (include/ of %s)", url)
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:  # file:// too
            with tarfile.open(fileobj=response, mode="r|*") as archive:
                count = _extract_include(archive, dest, strip=1)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise _NotThere(f"{url}: HTTP 404") from exc
        raise RuntimeError(f"{url}: HTTP {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, FileNotFoundError):
            raise _NotThere(f"{url}: no such file") from exc
        raise RuntimeError(f"{url}: {exc.reason}") from exc
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise RuntimeError(f"{url}: {type(exc).__name__}: {exc}") from exc
    if not count:
        raise _NotThere(f"{url}: no include/ folder in the archive")


def _is_git(folder: Path) -> bool:
    return (folder / ".git").exists() or ((folder / "HEAD").is_file() and (folder / "objects").is_dir())


def _from_git(repo: Path, tag: str, dest: Path) -> None:
    git = shutil.which("git")
    if git is None:
        raise RuntimeError(f"{repo} is a git repository but git is not on PATH")
    probe = subprocess.run([git, "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        detail = probe.stderr.strip().splitlines()
        raise _NotThere(f"{repo}: no tag {tag}" + (f" ({detail[-1]})" if detail else ""))
    proc = subprocess.Popen([git, "-C", str(repo), "archive", "--format=tar", tag, "include"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout: IO[bytes] = proc.stdout  # type: ignore[assignment]
    try:
        with tarfile.open(fileobj=stdout, mode="r|") as archive:
            count = _extract_include(archive, dest, strip=0)
    except tarfile.TarError:
        count = 0
    finally:
        stdout.close()
        err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
        proc.wait()
    if proc.returncode != 0 or not count:
        raise _NotThere(f"{repo}: git archive {tag} include failed: {err or 'no include/ at that tag'}")


def _from_folder(folder: Path, tag: str, dest: Path) -> None:
    include = folder / tag / "include"
    if not (include / "NvInfer.h").is_file():
        raise _NotThere(f"no {include / 'NvInfer.h'}")
    shutil.copytree(include, dest / "include", symlinks=False)


def _install(tag: str, tmp: Path, major: int) -> Headers:
    """Check the headers in ``tmp/include`` and rename ``tmp`` to ``<cache>/headers/<tag>``."""
    version = header_version(tmp / "include")
    if not (tmp / "include" / "NvInfer.h").is_file() or _major(version) != major:
        raise _NotThere(f"{tag} holds no NvInfer.h of TensorRT {major} (found {version or 'no version'})")
    final = headers_cache() / tag
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists() and not (final / "include" / "NvInfer.h").is_file():
        shutil.rmtree(final, ignore_errors=True)  # not headers: what a crash of an older version left
    try:
        os.rename(tmp, final)
    except OSError as exc:
        if not (final / "include" / "NvInfer.h").is_file():  # else: another process's complete copy
            raise RuntimeError(f"cannot store the headers in {final}: {exc}") from exc
    return Headers(final / "include", str(version), f"fetched ({tag})")


def _fetcher(source: str) -> tuple[Callable[[str, Path], None], Path | None]:
    """The function that fetches one tag's ``include/`` from ``source`` into a folder, and, for a
    folder source, its own ``include/`` (tried after the tags).

    Raises:
        UsageError: neither a URL template with ``{tag}`` nor an existing folder.
    """
    if "://" in source:
        if "{tag}" not in source:
            raise UsageError(f"headers source {source!r} is a URL without {{tag}}",
                             hint=f"give a template such as {DEFAULT_SOURCE}")
        return (lambda tag, dest: _from_url(source, tag, dest)), None
    folder = Path(source).expanduser()
    if not folder.is_dir():
        raise UsageError(f"headers source {source!r} is neither a URL template with {{tag}} nor a folder",
                         hint="give a URL template, a git clone of NVIDIA/TensorRT, or a folder holding "
                         "<tag>/include/NvInfer.h or include/NvInfer.h")
    if _is_git(folder):
        return (lambda tag, dest: _from_git(folder, tag, dest)), None
    return (lambda tag, dest: _from_folder(folder, tag, dest)), folder / "include"


def fetch_headers(tensorrt_version: str, source: str | None = None,
                  searched: list[str] | None = None) -> Headers:
    """Fetch ``include/`` of the TensorRT OSS repository at the first of :func:`tag_candidates` the source
    has, into ``<cache>/headers/<tag>/include``.

    Args:
        tensorrt_version: the TensorRT the plugin is built for.
        source: see the module docstring; default ``$DCNCONVERT_HEADERS_SOURCE``, else :data:`DEFAULT_SOURCE`.
        searched: local folders already looked at (named in the error).

    Raises:
        UsageError: a bad source.
        MissingDependencyError: no tag could be fetched (offline, no such tag), naming what was tried.
    """
    source = source or os.environ.get(SOURCE_ENV_VAR) or DEFAULT_SOURCE
    fetch_one, plain = _fetcher(source)
    tags = tag_candidates(tensorrt_version)
    major = version_tuple(tensorrt_version)[0]
    attempts: list[tuple[str, Callable[[str, Path], None]]] = [(tag, fetch_one) for tag in tags]
    tried: list[str] = []
    if plain is not None and (plain / "NvInfer.h").is_file():
        # A folder holding include/ itself: stored under the tag of the version it states.
        own = header_version(plain)
        if own is None:
            tried.append(f"{plain / 'NvInferVersion.h'} states no version")
        else:
            attempts.append((f"v{own}", lambda _tag, dest: shutil.copytree(plain, dest / "include",
                                                                          symlinks=False)))
    work = plugin_lib.cache_root() / "tmp"
    work.mkdir(parents=True, exist_ok=True)
    for tag, fetch in attempts:
        tmp = Path(tempfile.mkdtemp(prefix="headers-", dir=work))
        try:
            log.get_logger(__name__).debug("looking for the headers of tag %s in %s", tag, source)
            fetch(tag, tmp)
            return _install(tag, tmp, major)
        except _NotThere as exc:
            tried.append(str(exc))
        except RuntimeError as exc:  # the source itself is unreachable: the other tags would fail alike
            tried.append(str(exc))
            break
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    wanted = tags[1]  # vX.Y: the form most releases are tagged with
    local = f"no NvInfer.h of TensorRT {major} in {', '.join(searched)}; " if searched else ""
    raise MissingDependencyError(
        f"TensorRT {tensorrt_version}'s headers were not found: {local}none in the cache "
        f"({headers_cache()}/{{{','.join(tags)}}}/include); fetching them failed: {'; '.join(tried)}",
        hint=f"fetch include/ of NVIDIA/TensorRT at tag {wanted} (https://github.com/NVIDIA/TensorRT/tree/"
        f"{wanted}/include) and put it at {headers_cache() / wanted / 'include'}, or pass --headers DIR "
        f"(a folder holding NvInfer.h), or --headers-source (a URL template with {{tag}}, a git clone or a "
        "folder) where this machine can reach one")
