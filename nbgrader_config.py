"""nbgrader's settings where JupyterLab runs for the lesson (`make lab` serves notebooks/ from
here): its Validate button reads ./nbgrader_config.py of the server's working directory. The
course's settings, one copy of them: autograder/nbgrader_config.py. Only this checkout reads it;
no other course does (`make venv` writes no environment-wide nbgrader config).
"""

c = get_config()  # noqa: F821 (provided by traitlets when nbgrader loads this file)
load_subconfig("autograder/nbgrader_config.py")  # noqa: F821
