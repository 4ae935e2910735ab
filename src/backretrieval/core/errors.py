"""Exceptions. Every message names the offending item (file, id, language, model, parameter)."""


class BackretrievalError(ValueError):
    """Base class: bad input or configuration that the user can fix."""


class DataError(BackretrievalError):
    """A dataset, file, row, id, text or image is missing or malformed."""


class EncoderError(BackretrievalError):
    """An encoder is unknown, not installed, or produced unusable vectors."""


class ServiceError(EncoderError):
    """A remote service (an embedding API) gave no usable answer for a while -- rate limits,
    server errors, timeouts, lost or refused connections -- though the input is fine: retry later,
    or start the server. The command line exits with code 1 for it, not 2 (fix the input)."""


class UnsupportedLanguageError(EncoderError):
    """A model cannot embed texts of a language at all (e.g. a Cr5 model without a vocabulary
    for it). The evaluation grid skips that model for pairs with the language, with a warning."""


class MetricInputError(BackretrievalError):
    """Arrays handed to a metric have the wrong shape, values or parameters."""


class OutputError(BackretrievalError):
    """An output, model or cache folder cannot be written (a file is in the way, no permission)."""
