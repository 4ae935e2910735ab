"""Report layer: what analysis results look like to a reader -- the run writers, one function per
command that writes its folder, for the commands and Python alike (:mod:`.runs`), Markdown tables
(:mod:`.table`, :mod:`.cr5_tables`, :mod:`.catalogue`), figures (:mod:`.figures`,
:mod:`.compare_figures`, :mod:`.projection`) and HTML reports (:mod:`.html`,
:mod:`.compare_report`, :mod:`.meta_report`, :mod:`.image_retrieval`, :mod:`.case_study`), and a
relevance study's analysis (:mod:`.study_analysis`)."""
from .table import format_comparison, format_meta_table, format_summary

__all__ = ["format_comparison", "format_meta_table", "format_summary"]
