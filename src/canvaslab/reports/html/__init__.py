"""The HTML report: study folders -> one self-contained page (``page.build_report``) and its figures."""

from canvaslab.reports.html.page import REPORT_FILE, Report, build_report

__all__ = ["REPORT_FILE", "Report", "build_report"]
