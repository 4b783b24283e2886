import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# ../shared beside the checkout (CI clones the repo with shared/ next to it).
SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="session")
def shared() -> pathlib.Path:
    if not SHARED.is_dir():
        pytest.fail(f"../shared is expected beside the checkout at {SHARED}")
    return SHARED
