#include "tightpipe/schedule.h"
