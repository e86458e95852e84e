"""Metadata lives in setup.cfg; this adds Twisted's plugin directory, which has no
__init__.py by design (twisted.plugins is shared by every installed plugin)."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["twisted_namesrv", "twisted_namesrv.*", "spark_analysis", "spark_analysis.*"])
    + ["twisted.plugins"],
    package_data={"twisted.plugins": ["namesrv_plugin.py", "namesrv_controller_plugin.py"],
                  "twisted_namesrv.web": ["status.html"]},
)
