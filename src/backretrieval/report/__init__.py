"""Report layer: tables (and later figures and HTML) from analysis results."""
from .table import format_summary

__all__ = ["format_summary"]
