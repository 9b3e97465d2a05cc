//! Training for CodonTransformer (work in progress: see issue 4).
