"""The web playground served at ``/``: static HTML/CSS/JS (``static/``, shipped as package data, no
build step, no CDN) and the JSON endpoints under ``/ui/api/`` it reads (``routes.py``)."""
