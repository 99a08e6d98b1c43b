"""The Hugging Face Hub, through `huggingface_hub` (so `HF_ENDPOINT`,
`HF_TOKEN`, `HF_HUB_OFFLINE` and the cache locations are its): a
repository's files with their sizes and hashes, and one file's download."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from inferd.model_store.errors import StoreError
from inferd.model_store.hub_files import HubFile


class HubError(StoreError):
    """The hub could not be asked, or said no."""


class RepoNotFound(HubError):
    pass


@dataclass(frozen=True)
class Listing:
    repo: str
    revision: str  # the commit the files are read at
    endpoint: str
    files: list[HubFile]
    license: str | None


def list_repo(repo: str) -> Listing:
    import huggingface_hub
    from huggingface_hub import errors

    # HF_ENDPOINT read now, not when huggingface_hub was imported.
    api = huggingface_hub.HfApi(endpoint=os.environ.get("HF_ENDPOINT", "").rstrip("/") or None)
    try:
        info = api.model_info(repo, files_metadata=True)
    except errors.GatedRepoError:
        raise HubError(f"{repo} is gated on {api.endpoint}: accept its terms there and set HF_TOKEN") from None
    except errors.RepositoryNotFoundError:
        raise RepoNotFound(f"{repo} is not a model repository on {api.endpoint} (or it is private: set HF_TOKEN)"
                           ) from None
    except errors.OfflineModeIsEnabled:
        raise HubError(f"cannot pull {repo}: HF_HUB_OFFLINE is set") from None
    except (errors.HfHubHTTPError, OSError) as error:
        raise HubError(f"cannot list {repo} on {api.endpoint}: {_reason(error)}") from None
    except Exception as error:  # httpx transport errors (no route, DNS, TLS)
        if type(error).__module__.split(".")[0] not in ("httpx", "httpx2", "httpcore"):
            raise
        raise HubError(f"cannot reach {api.endpoint} to list {repo}: {_reason(error)}; check the network or "
                       "HF_ENDPOINT") from None
    files = [HubFile(s.rfilename, s.lfs.size if s.lfs else (s.size or 0), s.lfs.sha256 if s.lfs else None,
                     s.blob_id) for s in info.siblings or ()]
    card = info.card_data
    return Listing(repo, info.sha or "main", api.endpoint, files, getattr(card, "license", None) if card else None)


def cached_file(listing: Listing, file: HubFile) -> Path | None:
    """The file in huggingface_hub's own cache at this revision, if something put it there."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(listing.repo, file.name, revision=listing.revision)
    return Path(found).resolve() if isinstance(found, str) else None  # the blob, not the snapshot's symlink


def download(listing: Listing, file: HubFile, into: Path, bar_class) -> None:
    """Append the rest of `file` to `into` (Range from its size: an interrupted pull resumes)."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    url = hf_hub_url(listing.repo, file.name, revision=listing.revision, endpoint=listing.endpoint)
    resume = into.stat().st_size if into.exists() else 0
    try:
        with open(into, "ab") as out:
            http_get(url, out, resume_size=resume, headers=build_hf_headers(), expected_size=file.size,
                     displayed_filename=file.name, tqdm_class=bar_class)
    except StoreError:
        raise
    except Exception as error:
        raise HubError(f"downloading {file.name} from {listing.repo} failed: {_reason(error)}; "
                       "pull again to continue where it stopped") from None


def _reason(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__
