// A fast driver for nlohmann::json SAX handlers (internal to the report module): the Kineto reader
// spends most of its time in nlohmann's lexer (a function call, a token-string append and a
// position update per byte); this scanner makes the same handler calls from a buffer it refills,
// copying runs of plain string bytes at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>

namespace tightpipe::report_internal {

// Reads up to `cap` bytes into `buf`: the count read, 0 at the end of the input, < 0 on an error.
using JsonReadFn = std::function<int64_t(char* buf, size_t cap)>;

// Drives `sax` over the text `read` yields. Returns true when the text is one valid JSON value
// (RFC 8259, UTF-8; optional whitespace around it) and every handler call returned true: the
// handler then got exactly the calls nlohmann::json::sax_parse(..., strict = true) makes, in the
// same order, with the same arguments (number_float's text is the number as written, with the C
// locale's decimal point as nlohmann writes it). Returns false otherwise (invalid JSON, a number
// nlohmann refuses, a read error, a handler call that returned false, a byte-order mark): the
// handler may have had some calls; start over with nlohmann's parser and a fresh handler, which
// says what is wrong and where (errors are rare; their messages stay nlohmann's).
bool scan_json(const JsonReadFn& read, nlohmann::json_sax<nlohmann::json>* sax);

}  // namespace tightpipe::report_internal
