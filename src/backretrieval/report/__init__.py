"""Report layer: tables (and later figures and HTML) from analysis results."""
from .table import format_comparison, format_meta_table, format_summary

__all__ = ["format_comparison", "format_meta_table", "format_summary"]
