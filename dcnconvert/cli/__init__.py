"""The ``dcnconvert`` command line: click commands over :mod:`dcnconvert.api`. :mod:`.main` holds the
group (``main`` is the console script) and ``inspect``/``rewrite``/``reference``, :mod:`.engine` the
engine commands, :mod:`.plugin` the ``plugin`` group, :mod:`.common` the runner shared by all.
"""
