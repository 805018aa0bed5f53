"""dspark_train: the PyTorch toolkit that builds dspark's reference model family (target, draft
model, DSpark drafter) and the test data derived from it. See tools/train/README.md.

    /usr/bin/python3 -m dspark_train --help        # with tools/train on PYTHONPATH
"""
