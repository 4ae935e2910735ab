"""What text and image model objects share: how they are called and their identity."""
from __future__ import annotations

import numpy as np
import pytest

from backretrieval.core import EncoderError
from backretrieval.encoders.python_objects import encode_call, inference, object_identity, object_name, torch_fingerprint


class WithEncode:
    """An encode method with the sentence-transformers keywords."""

    def encode(self, items, convert_to_numpy=False, show_progress_bar=True):
        """Records how it was called."""
        return np.array([[len(items), convert_to_numpy, show_progress_bar]], dtype=np.float32)


def plain(items):
    """A plain function."""
    return np.ones((len(items), 2))


def test_encode_call_probes_the_signature():
    assert encode_call(WithEncode(), "needs").__call__(["a"]).tolist() == [[1.0, 1.0, 0.0]]
    assert encode_call(plain, "needs") is plain
    with pytest.raises(EncoderError, match="a model needs encode; got int"):
        encode_call(3, "a model needs encode")


def test_identity_version_else_run_only():
    assert object_identity(plain, "v1") == (True, "python:builtins.function:v1")
    assert object_identity(plain, None) == (False, "python:builtins.function:run-only")
    assert object_identity(WithEncode(), None) == (False, f"python:{__name__}.WithEncode:run-only")
    assert torch_fingerprint(plain) is None
    assert object_name(plain) == "plain" and object_name(WithEncode()) == "WithEncode"


def test_a_torch_module_is_identified_by_its_weights_and_run_in_eval_mode():
    import torch

    torch.manual_seed(0)
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    cacheable, version = object_identity(a, None)
    assert cacheable and version.startswith("python:torch.nn.modules.linear.Linear:") and version.endswith("@cpu")
    assert torch_fingerprint(a) == torch_fingerprint(a) != torch_fingerprint(b)
    a.train()
    with inference(a):
        assert not a.training and not torch.is_grad_enabled()
    assert a.training
