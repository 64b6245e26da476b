"""streamnb: streaming generative classifiers (Naive Bayes, GDA) for mail streams on Kafka."""

__version__ = "0.1.0"
