import setuptools; setuptools.setup()  # noqa: E702  (metadata lives in setup.cfg)
