// The fast SAX driver (json_scan.h). It follows nlohmann's lexer and parser (3.11) rule for rule
// on valid input and gives up on everything else, so that nlohmann reports the error.
#include "report/json_scan.h"

#include <array>
#include <charconv>
#include <clocale>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace tightpipe::report_internal {

namespace {

using Sax = nlohmann::json_sax<nlohmann::json>;

// Bytes that end a run of plain string bytes: the quote, the backslash, control characters and
// every non-ASCII byte (validated as UTF-8 one sequence at a time).
constexpr std::array<bool, 256> kStringStop = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = c == '"' || c == '\\' || c < 0x20 || c >= 0x80;
  return t;
}();

bool is_digit(int c) { return c >= '0' && c <= '9'; }

class Scanner {
 public:
  Scanner(const JsonReadFn& read, Sax* sax) : read_(read), sax_(sax), buf_(1 << 20) {
    // nlohmann writes a float's text with the locale's decimal point (lexer::get_decimal_point).
    const std::lconv* loc = std::localeconv();
    decimal_point_ = loc == nullptr || loc->decimal_point == nullptr ? '.' : *loc->decimal_point;
  }

  bool run() {
    // A byte-order mark (which nlohmann skips) or anything like one: nlohmann's call.
    if (peek() == 0xEF) return false;
    std::vector<char> open;  // the containers around the current value: 1 = object
    for (;;) {
      // A value starts here.
      int c = skip_whitespace();
      if (c == '{') {
        ++pos_;
        if (!sax_->start_object(static_cast<std::size_t>(-1))) return false;
        if (skip_whitespace() == '}') {
          ++pos_;
          if (!sax_->end_object()) return false;
        } else {
          if (!key()) return false;
          open.push_back(1);
          continue;
        }
      } else if (c == '[') {
        ++pos_;
        if (!sax_->start_array(static_cast<std::size_t>(-1))) return false;
        if (skip_whitespace() == ']') {
          ++pos_;
          if (!sax_->end_array()) return false;
        } else {
          open.push_back(0);
          continue;
        }
      } else if (!scalar(c)) {
        return false;
      }
      // After a complete value: close containers until one goes on with a comma.
      for (;;) {
        if (open.empty()) {
          // Strict: nothing after it. nlohmann's lexer takes a NUL byte for the end of the input.
          const int end = skip_whitespace();
          return end == 0 || (end < 0 && !failed_);
        }
        c = skip_whitespace();
        if (c == ',') {
          ++pos_;
          if (open.back() && !key()) return false;
          break;
        }
        if (c != (open.back() ? '}' : ']')) return false;
        ++pos_;
        const bool object = open.back();
        open.pop_back();
        if (!(object ? sax_->end_object() : sax_->end_array())) return false;
      }
    }
  }

 private:
  bool refill() {
    if (eof_) return false;
    const int64_t n = read_(buf_.data(), buf_.size());
    if (n <= 0) {
      eof_ = true;
      failed_ = n < 0;
      return false;
    }
    pos_ = 0;
    end_ = static_cast<size_t>(n);
    return true;
  }
  // The next byte (0-255) without taking it; -1 at the end.
  int peek() {
    if (pos_ == end_ && !refill()) return -1;
    return static_cast<unsigned char>(buf_[pos_]);
  }
  int get() {
    const int c = peek();
    if (c >= 0) ++pos_;
    return c;
  }
  int skip_whitespace() {
    for (;;) {
      for (; pos_ < end_; ++pos_) {
        const char c = buf_[pos_];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return static_cast<unsigned char>(c);
      }
      if (!refill()) return -1;
    }
  }

  // `"name"` then `:` (whitespace around), at a key's opening quote or whitespace before it.
  bool key() {
    if (skip_whitespace() != '"') return false;
    ++pos_;
    if (!string(text_) || !sax_->key(text_)) return false;
    if (skip_whitespace() != ':') return false;
    ++pos_;
    return true;
  }

  bool scalar(int c) {
    switch (c) {
      case '"':
        ++pos_;
        return string(text_) && sax_->string(text_);
      case 't':
        return literal("true") && sax_->boolean(true);
      case 'f':
        return literal("false") && sax_->boolean(false);
      case 'n':
        return literal("null") && sax_->null();
      default:
        return (c == '-' || is_digit(c)) && number();
    }
  }

  bool literal(const char* word) {
    for (; *word; ++word) {
      if (get() != static_cast<unsigned char>(*word)) return false;
    }
    return true;
  }

  // After the opening quote: the string's value, unescaped, into `out`.
  bool string(std::string& out) {
    out.clear();
    for (;;) {
      if (pos_ == end_ && !refill()) return false;
      const char* p = buf_.data() + pos_;
      const char* e = buf_.data() + end_;
      const char* q = p;
      while (q < e && !kStringStop[static_cast<unsigned char>(*q)]) ++q;
      out.append(p, static_cast<size_t>(q - p));
      pos_ += static_cast<size_t>(q - p);
      if (q == e) continue;
      const int c = static_cast<unsigned char>(*q);
      ++pos_;
      if (c == '"') return true;
      if (c == '\\') {
        if (!escape(out)) return false;
      } else if (c < 0x20 || !utf8_sequence(c, out)) {
        return false;
      }
    }
  }

  // A multi-byte UTF-8 sequence after its lead byte, in the ranges RFC 3629 allows (as
  // nlohmann's lexer checks them: no overlong forms, no surrogates, nothing above U+10FFFF).
  bool utf8_sequence(int lead, std::string& out) {
    int lo = 0x80, hi = 0xBF, more = 0;
    if (lead >= 0xC2 && lead <= 0xDF) {
      more = 1;
    } else if (lead == 0xE0) {
      lo = 0xA0, more = 2;
    } else if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) {
      more = 2;
    } else if (lead == 0xED) {
      hi = 0x9F, more = 2;
    } else if (lead == 0xF0) {
      lo = 0x90, more = 3;
    } else if (lead >= 0xF1 && lead <= 0xF3) {
      more = 3;
    } else if (lead == 0xF4) {
      hi = 0x8F, more = 3;
    } else {
      return false;
    }
    out.push_back(static_cast<char>(lead));
    for (int i = 0; i < more; ++i) {
      const int c = get();
      if (c < lo || c > hi) return false;
      out.push_back(static_cast<char>(c));
      lo = 0x80, hi = 0xBF;  // only the first continuation byte has a narrower range
    }
    return true;
  }

  int hex4() {
    int v = 0;
    for (int i = 0; i < 4; ++i) {
      const int c = get();
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }

  // After a backslash.
  bool escape(std::string& out) {
    const int c = get();
    switch (c) {
      case '"':
      case '\\':
      case '/':
        out.push_back(static_cast<char>(c));
        return true;
      case 'b':
        out.push_back('\b');
        return true;
      case 'f':
        out.push_back('\f');
        return true;
      case 'n':
        out.push_back('\n');
        return true;
      case 'r':
        out.push_back('\r');
        return true;
      case 't':
        out.push_back('\t');
        return true;
      case 'u':
        break;
      default:
        return false;
    }
    int cp = hex4();
    if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return false;  // a low surrogate alone
    if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate: its low one must follow
      if (get() != '\\' || get() != 'u') return false;
      const int low = hex4();
      if (low < 0xDC00 || low > 0xDFFF) return false;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    return true;
  }

  // A run of digits, copied a buffer at a time.
  void digits() {
    for (;;) {
      size_t q = pos_;
      while (q < end_ && is_digit(static_cast<unsigned char>(buf_[q]))) ++q;
      text_.append(buf_.data() + pos_, q - pos_);
      pos_ = q;
      if (q < end_ || !refill()) return;
    }
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, then nlohmann's conversions: an integer that
  // fits is number_unsigned (no sign) or number_integer (a minus sign), anything else strtod's
  // double with the text (refused when not finite).
  bool number() {
    text_.clear();
    bool integer = true;
    int c = get();
    const bool negative = c == '-';
    if (negative) {
      text_.push_back('-');
      c = get();
    }
    if (!is_digit(c)) return false;
    text_.push_back(static_cast<char>(c));
    if (c != '0') digits();
    if (peek() == '.') {
      ++pos_;
      integer = false;
      text_.push_back(decimal_point_);
      if (!is_digit(peek())) return false;
      digits();
    }
    if (c = peek(); c == 'e' || c == 'E') {
      ++pos_;
      integer = false;
      text_.push_back(static_cast<char>(c));
      if (c = peek(); c == '+' || c == '-') {
        ++pos_;
        text_.push_back(static_cast<char>(c));
      }
      if (!is_digit(peek())) return false;
      digits();
    }
    const char* first = text_.data();
    const char* last = first + text_.size();
    if (integer && negative) {
      int64_t v = 0;
      if (std::from_chars(first, last, v).ec == std::errc()) return sax_->number_integer(v);
    } else if (integer) {
      uint64_t v = 0;
      if (std::from_chars(first, last, v).ec == std::errc()) return sax_->number_unsigned(v);
    }
    const double v = std::strtod(first, nullptr);
    return std::isfinite(v) && sax_->number_float(v, text_);
  }

  const JsonReadFn& read_;
  Sax* sax_;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
  bool eof_ = false, failed_ = false;
  char decimal_point_ = '.';
  std::string text_;  // the current string or number
};

}  // namespace

bool scan_json(const JsonReadFn& read, nlohmann::json_sax<nlohmann::json>* sax) {
  return Scanner(read, sax).run();
}

}  // namespace tightpipe::report_internal
