"""The `git` kind: a repository cloned at a pinned revision, with hooks, submodules and LFS off."""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

from sftbuild.harvest.kinds import KINDS, SourceKind
from sftbuild.harvest.sources import Source, SourceError, Tree, cache_dir, git_env

GIT_URL = re.compile(r"^(git\+)?(https?|ssh|file|git)://")
GIT_TIMEOUT = 600
# never run hooks, filters or submodules from a repository we do not trust
GIT_SAFE = ["-c", "core.hooksPath=/dev/null", "-c", "submodule.recurse=false", "-c", "protocol.file.allow=always",
            "-c", "filter.lfs.smudge=", "-c", "filter.lfs.process=", "-c", "filter.lfs.required=false",
            "-c", "core.fsmonitor=false", "-c", "core.symlinks=true"]


def split_rev(url: str) -> tuple[str, str]:
    """`https://host/x.git@REV` -> (url, REV); the @ of `user@host` is not a revision."""
    head, sep, rev = url.rpartition("@")
    if sep and rev and "/" not in rev and ":" not in rev and "://" in head:
        return head, rev
    return url, ""


def run_git(args: list[str], cwd: Path | None = None, timeout: int = GIT_TIMEOUT) -> str:
    try:
        out = subprocess.run(["git", *GIT_SAFE, *args], cwd=cwd, capture_output=True, text=True,
                             timeout=timeout, env=git_env(), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise SourceError(f"git {args[0]} timed out after {timeout} s") from e
    except OSError as e:
        raise SourceError(f"cannot run git: {e}") from e
    if out.returncode != 0:
        msg = (out.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise SourceError(f"git {args[0]} failed: {msg}")
    return out.stdout.strip()


@KINDS.register
class Git(SourceKind):
    """A repository cloned at `revision` (URL@REV on the command line); hooks, submodules and LFS never run.

    Unpinned URLs are refused unless `harvest.allow_unpinned`; a pinned commit is checked.
    """
    name = "git"
    version = 1
    order = 30

    def recognise(self, spec: str, path: Path) -> Source | None:
        if not GIT_URL.match(spec):
            return None
        url, rev = split_rev(spec[4:] if spec.startswith("git+") else spec)
        return Source(name=spec, kind=self.name, location=url, revision=rev, network=not url.startswith("file://"))

    def endpoint(self, src: Source, workspace: Path, cfg) -> str | None:
        cloned = (_clone_dir(src, workspace, cfg) / ".sftbuild-done").is_file()
        return None if cloned or src.location.startswith("file://") else src.location

    def materialize(self, src: Source, workspace: Path, cfg) -> Tree:
        url, rev = src.location, src.revision
        if not rev and not cfg.allow_unpinned:
            raise SourceError(f"{url} is not pinned to a revision; write URL@REV or pass --allow-unpinned")
        dest = _clone_dir(src, workspace, cfg)
        done = dest / ".sftbuild-done"
        if not done.is_file():
            if dest.exists():
                shutil.rmtree(dest)  # a clone interrupted earlier
            dest.parent.mkdir(parents=True, exist_ok=True)
            run_git(["clone", "--no-checkout", "--quiet", "--no-recurse-submodules", url, str(dest)])
            run_git(["-C", str(dest), "checkout", "--quiet", *(["--detach", rev] if rev else [])])
            done.write_text(url + "\n")
        commit = run_git(["-C", str(dest), "rev-parse", "HEAD"])
        if rev and re.fullmatch(r"[0-9a-f]{7,40}", rev) and not commit.startswith(rev):
            raise SourceError(f"{url}: checked out {commit}, expected {rev}")
        prov = {"source_kind": self.name, "url": url, "commit": commit, "revision": rev or None}
        return Tree(dest, prov, src.include, src.exclude + [".git/*", ".sftbuild-done"])


def _clone_dir(src: Source, workspace: Path, cfg) -> Path:
    key = hashlib.sha256(f"{src.location}@{src.revision}".encode()).hexdigest()[:16]
    return cache_dir(workspace, cfg) / "git" / key
