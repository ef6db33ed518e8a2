"""The git layer: the only code that runs git (pinned flags, hermetic environment) and the
vocabulary the layers above use (the Git facade, Index files, object sharing, long-lived
cat-file/hash-object processes, tree stores). It knows nothing of series or patches' meaning.
"""
