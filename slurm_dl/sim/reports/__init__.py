"""What a finished replay says: its figures (metrics), the HTML reports of ``simulate`` and
``tune``, plots and inline SVG charts."""
