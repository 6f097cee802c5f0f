// fathom eval (src/eval/perplexity.h): perplexity as served against the PyTorch reference.
#include <gtest/gtest.h>

#include "eval/perplexity.h"
