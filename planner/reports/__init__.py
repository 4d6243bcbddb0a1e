"""Reports: the report's content and its renderers (terminal, Markdown, HTML, CSV), plots, gate output."""
