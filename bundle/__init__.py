"""Author -> release: the lesson's authoring pipeline (sync, release, execute, figures), the
learner's check before handing in (validate), and the benchmark of grading the lesson
(bench_grading). The grading engine is the autograder package."""
