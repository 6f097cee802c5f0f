// cpp-httplib's header, included as a system header: it trips our -Wconversion/-Wshadow
// warnings (which are errors here) in code we do not own.
#pragma once
#pragma GCC system_header

#include <httplib.h>
