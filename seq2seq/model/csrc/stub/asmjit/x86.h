// See core.h: the declarations fbgemm's SimdUtils.h names.
#pragma once

#include "core.h"
