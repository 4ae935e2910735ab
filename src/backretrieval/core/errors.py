"""Exceptions. Every message names the offending item (file, id, language, model, parameter)."""


class BackretrievalError(ValueError):
    """Base class: bad input or configuration that the user can fix."""


class DataError(BackretrievalError):
    """A dataset, file, row, id, text or image is missing or malformed."""


class EncoderError(BackretrievalError):
    """An encoder is unknown, not installed, or produced unusable vectors."""


class MetricInputError(BackretrievalError):
    """Arrays handed to a metric have the wrong shape, values or parameters."""
