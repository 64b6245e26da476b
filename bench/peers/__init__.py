"""streamnb beside river, scikit-learn and bogofilter on one stream (``python -m bench.peers``)."""
