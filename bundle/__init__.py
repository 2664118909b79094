"""Author -> release: the lesson's authoring pipeline (sync, release, execute, figures) and the
learner's check before handing in (validate). The grading engine is the autograder package."""
