"""Finding deformable convolutions: the table of exporter forms, their attribute readers and parser,
the search over a graph (:mod:`.finder`), and the checks made before anything is written.
"""
