import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the project. CI always has it: fail loudly, never skip."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"real test data not found at {SHARED_DATA} (../shared/data beside the project)")
    return SHARED_DATA


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """One cache for the whole test session, never the user's: real images and texts are encoded
    once per run and shared by every test file. ``BACKRETRIEVAL_TEST_CACHE=DIR`` keeps it between
    runs (handy locally; CI starts empty). The shared data is found through the loaders' env vars."""
    keep = os.environ.get("BACKRETRIEVAL_TEST_CACHE")
    root = Path(keep) if keep else tmp_path_factory.mktemp("session-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BACKRETRIEVAL_CACHE", str(root))
        mp.setenv("BACKRETRIEVAL_EMOJI_DIR", str(SHARED_DATA / "npm"))
        mp.setenv("BACKRETRIEVAL_DDTP_DIR", str(SHARED_DATA / "ddtp"))
        mp.setenv("BACKRETRIEVAL_MULTI30K", str(SHARED_DATA / "multi30k"))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        yield root
