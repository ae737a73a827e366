"""`sftbuild export --push-to-hub REPO`: upload the export folder as a Hugging Face dataset repo.

Uses `huggingface_hub.HfApi` (token from `HF_TOKEN` or `huggingface-cli login`; endpoint from
`HF_ENDPOINT`). The folder already is the layout the Hub serves: README.md with `configs:`,
data/<config>/<split>-*.parquet. Hub errors become one sentence.
"""
from __future__ import annotations

from pathlib import Path

from sftbuild.context import UserError


def check(repo: str) -> None:
    """A repo id is OWNER/NAME; checked before anything is written."""
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise UserError(f"--push-to-hub {repo!r}: expected OWNER/NAME")


def push(folder: Path, repo: str, private: bool = True) -> str:
    """Create `repo` (a dataset repo, private unless it exists) and upload `folder`; returns the commit URL."""
    check(repo)
    try:
        import huggingface_hub
    except ImportError as e:
        raise UserError("--push-to-hub needs huggingface_hub: pip install huggingface_hub") from e
    api = huggingface_hub.HfApi()
    try:
        api.create_repo(repo, repo_type="dataset", private=private, exist_ok=True)
        info = api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="dataset",
                                 commit_message="sftbuild export")
    except Exception as e:  # network, auth and Hub errors alike: one sentence, no traceback
        raise UserError(f"could not push {folder} to the Hub dataset {repo}: {type(e).__name__}: {e}"[:400]) from e
    return str(getattr(info, "commit_url", info))
