#include <gtest/gtest.h>
#include "tokenizer/tokenizer.h"
