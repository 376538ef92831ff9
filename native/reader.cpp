// See reader.hpp.
#include "reader.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <system_error>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace hta_native {

const char* const kFieldNames[F_COUNT] = {"ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp", "s"};

// ------------------------------------------------------------------ Interner

static inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ULL;
    h ^= h >> 29;
  }
  for (; i < n; i++) h = (h ^ static_cast<unsigned char>(p[i])) * 0x100000001b3ULL;
  h ^= h >> 32;
  return h * 0x9E3779B97F4A7C15ULL;
}

void Interner::grow() {
  size_t cap = slots_.empty() ? 64 : slots_.size() * 2;
  slots_.assign(cap, -1);
  for (size_t i = 0; i < offsets_.size(); i++) {
    size_t s = hashes_[i] & (cap - 1);
    while (slots_[s] != -1) s = (s + 1) & (cap - 1);
    slots_[s] = static_cast<int32_t>(i);
  }
}

int32_t Interner::intern(const char* p, size_t n) {
  if ((offsets_.size() + 1) * 2 > slots_.size()) grow();
  uint64_t h = hash_bytes(p, n);
  size_t mask = slots_.size() - 1, s = h & mask;
  while (true) {
    int32_t id = slots_[s];
    if (id == -1) break;
    if (hashes_[id] == h && lengths_[id] == n && std::memcmp(arena_.data() + offsets_[id], p, n) == 0) return id;
    s = (s + 1) & mask;
  }
  int32_t id = static_cast<int32_t>(offsets_.size());
  offsets_.push_back(arena_.size());
  lengths_.push_back(static_cast<uint32_t>(n));
  hashes_.push_back(h);
  arena_.append(p, n);
  slots_[s] = id;
  return id;
}

void Interner::clear() {
  arena_.clear();
  offsets_.clear();
  lengths_.clear();
  hashes_.clear();
  slots_.clear();
}

void Column::clear() {
  kind.clear();
  i64.clear();
  f64.clear();
  code.clear();
  strs.clear();
  texts.clear();
}

void Column::resize(size_t n) {
  kind.resize(n, K_ABSENT);
  i64.resize(n, 0);
  f64.resize(n, std::numeric_limits<double>::quiet_NaN());
  code.resize(n, -1);
}

// ------------------------------------------------------------------ tokenizer

namespace {

struct Reject {};  // thrown inside the tokenizer; read_events returns false

class Reader {
 public:
  Reader(const char* buf, size_t len, std::string* why) : p_(reinterpret_cast<const unsigned char*>(buf)),
      end_(reinterpret_cast<const unsigned char*>(buf) + len), why_(why) {}

  [[noreturn]] void fail(const char* what) {
    *why_ = what;
    throw Reject();
  }

  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) p_++;
  }
  bool at_end() const { return p_ >= end_; }
  unsigned char peek() {
    if (p_ >= end_) fail("unexpected end of input");
    return *p_;
  }
  void expect(unsigned char c) {
    if (p_ >= end_ || *p_ != c) fail("unexpected character");
    p_++;
  }
  const unsigned char* pos() const { return p_; }

  // A string at p_ (the opening quote). Returns its decoded bytes: a view into
  // the input when it holds no escape, else into ``scratch``.
  std::pair<const char*, size_t> string(std::string* scratch) {
    expect('"');
    const unsigned char* start = p_;
    bool escaped = false;
    for (;;) {
      // the usual run: printable ASCII without quote or backslash, 16 bytes at a time (SSE2),
      // then 8 at a time
#if defined(__SSE2__)
      while (end_ - p_ >= 16) {
        __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p_));
        __m128i quote = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
        __m128i bs = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
        __m128i low = _mm_cmplt_epi8(v, _mm_set1_epi8(0x20));  // signed: bytes >= 0x80 too
        int m = _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, bs), low));
        if (m) {
          p_ += __builtin_ctz(static_cast<unsigned>(m));
          break;
        }
        p_ += 16;
      }
#endif
      while (end_ - p_ >= 8) {
        uint64_t w;
        std::memcpy(&w, p_, 8);
        uint64_t hi = w & 0x8080808080808080ULL;
        uint64_t ctl = (w - 0x2020202020202020ULL) & ~w & 0x8080808080808080ULL;  // a byte < 0x20
        uint64_t q = w ^ 0x2222222222222222ULL;
        uint64_t quote = (q - 0x0101010101010101ULL) & ~q & 0x8080808080808080ULL;
        uint64_t b = w ^ 0x5C5C5C5C5C5C5C5CULL;
        uint64_t bs = (b - 0x0101010101010101ULL) & ~b & 0x8080808080808080ULL;
        if (hi | ctl | quote | bs) break;
        p_ += 8;
      }
      if (p_ >= end_) fail("unterminated string");
      unsigned char c = *p_;
      if (c == '"') break;
      if (c == '\\') {
        escaped = true;
        p_++;
        if (p_ >= end_) fail("unterminated string");
        unsigned char e = *p_++;
        if (e == 'u') {
          uint32_t u = hex4();
          if (u >= 0xD800 && u <= 0xDBFF) {
            if (end_ - p_ < 6 || p_[0] != '\\' || p_[1] != 'u') fail("a lone surrogate escape");
            p_ += 2;
            uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("a lone surrogate escape");
          } else if (u >= 0xDC00 && u <= 0xDFFF) {
            fail("a lone surrogate escape");
          }
        } else if (!(e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't')) {
          fail("an invalid escape");
        }
        continue;
      }
      if (c < 0x20) fail("a control character in a string");
      if (c < 0x80) {
        p_++;
        continue;
      }
      utf8();
    }
    const unsigned char* stop = p_;
    p_++;  // the closing quote
    if (!escaped) return {reinterpret_cast<const char*>(start), static_cast<size_t>(stop - start)};
    scratch->clear();
    decode(start, stop, scratch);
    return {scratch->data(), scratch->size()};
  }

  // Skip a value of any kind, checking it; returns its kind.
  Kind value(int depth) {
    unsigned char c = peek();
    switch (c) {
      case '"': {
        skip_string();
        return K_STR;
      }
      case '{': {
        if (depth >= kMaxDepth) fail("nesting too deep");
        p_++;
        ws();
        if (peek() == '}') {
          p_++;
          return K_TEXT;
        }
        for (;;) {
          ws();
          skip_string();
          ws();
          expect(':');
          ws();
          value(depth + 1);
          ws();
          c = peek();
          p_++;
          if (c == '}') return K_TEXT;
          if (c != ',') fail("expected , or }");
        }
      }
      case '[': {
        if (depth >= kMaxDepth) fail("nesting too deep");
        p_++;
        ws();
        if (peek() == ']') {
          p_++;
          return K_TEXT;
        }
        for (;;) {
          ws();
          value(depth + 1);
          ws();
          c = peek();
          p_++;
          if (c == ']') return K_TEXT;
          if (c != ',') fail("expected , or ]");
        }
      }
      case 't': literal("true"); return K_TRUE;
      case 'f': literal("false"); return K_FALSE;
      case 'n': literal("null"); return K_NULL;
      default: {
        int64_t i;
        double d;
        return number(&i, &d);
      }
    }
  }

  // A number at p_: K_INT (``*i`` and ``*d``) or K_FLOAT (``*d``). One pass over its digits;
  // a float whose digits and power of ten are exact doubles is made by one correctly rounded
  // division or product (Clinger's fast path: Kineto's "4457416195056.262", "8.235"), as
  // from_chars rounds it; any other float by from_chars.
  Kind number(int64_t* i, double* d) {
    static const double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    const unsigned char* start = p_;
    bool neg = false;
    if (p_ < end_ && *p_ == '-') {
      neg = true;
      p_++;
    }
    if (p_ >= end_ || *p_ < '0' || *p_ > '9') fail("invalid value");
    uint64_t m = 0;  // the digits (wraps past 19 digits: then unused)
    int ndigits = 0;
    if (*p_ == '0') {
      p_++;
      ndigits = 1;
    } else {
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
        m = m * 10 + (*p_++ - '0');
        ndigits++;
      }
    }
    int nd = ndigits, frac = 0;
    bool is_float = false;
    if (p_ < end_ && *p_ == '.') {
      is_float = true;
      p_++;
      if (p_ >= end_ || *p_ < '0' || *p_ > '9') fail("invalid number");
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
        m = m * 10 + (*p_++ - '0');
        nd++;
        frac++;
      }
    }
    int e10 = 0;
    bool exp_small = true;
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      is_float = true;
      p_++;
      bool eneg = false;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) eneg = *p_++ == '-';
      if (p_ >= end_ || *p_ < '0' || *p_ > '9') fail("invalid number");
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
        if (e10 < 100000) e10 = e10 * 10 + (*p_ - '0');
        else exp_small = false;
        p_++;
      }
      if (eneg) e10 = -e10;
    }
    if (!is_float) {
      if (ndigits > 19) fail("an integer outside int64");  // m < 10**19 < 2**64 below
      if (neg ? m > 0x8000000000000000ULL : m > 0x7FFFFFFFFFFFFFFFULL) fail("an integer outside int64");
      *i = neg ? static_cast<int64_t>(0 - m) : static_cast<int64_t>(m);
      *d = static_cast<double>(*i);
      return K_INT;
    }
    e10 -= frac;
    if (exp_small && nd <= 19 && m <= (static_cast<uint64_t>(1) << 53) && e10 >= -22 && e10 <= 22) {
      double v = static_cast<double>(m);
      v = e10 < 0 ? v / kPow10[-e10] : v * kPow10[e10];
      *d = neg ? -v : v;
      return K_FLOAT;
    }
    auto r = std::from_chars(reinterpret_cast<const char*>(start), reinterpret_cast<const char*>(p_), *d);
    if (r.ec != std::errc() || r.ptr != reinterpret_cast<const char*>(p_)) fail("a float outside double's range");
    if (!std::isfinite(*d)) fail("a float outside double's range");
    return K_FLOAT;
  }

  void skip_string() {
    static thread_local std::string scratch;  // decoded only where escaped, then dropped
    string(&scratch);
  }

 private:
  void literal(const char* word) {
    size_t n = std::strlen(word);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0) fail("invalid literal");
    p_ += n;
  }

  uint32_t hex4() {
    if (end_ - p_ < 4) fail("a short \\u escape");
    uint32_t u = 0;
    for (int k = 0; k < 4; k++) {
      unsigned char h = *p_++;
      u <<= 4;
      if (h >= '0' && h <= '9') u |= h - '0';
      else if (h >= 'a' && h <= 'f') u |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') u |= h - 'A' + 10;
      else fail("an invalid \\u escape");
    }
    return u;
  }

  // One UTF-8 sequence starting at p_ (a byte >= 0x80), strictly (RFC 3629).
  void utf8() {
    unsigned char c = *p_;
    size_t left = end_ - p_;
    auto cont = [&](size_t k) { return k < left && (p_[k] & 0xC0) == 0x80; };
    if (c >= 0xC2 && c <= 0xDF) {
      if (!cont(1)) fail("invalid UTF-8");
      p_ += 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      if (!cont(1) || !cont(2)) fail("invalid UTF-8");
      unsigned char c1 = p_[1];
      if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F)) fail("invalid UTF-8");
      p_ += 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      if (!cont(1) || !cont(2) || !cont(3)) fail("invalid UTF-8");
      unsigned char c1 = p_[1];
      if ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F)) fail("invalid UTF-8");
      p_ += 4;
    } else {
      fail("invalid UTF-8");
    }
  }

  static uint32_t hex_at(const unsigned char* q) {
    uint32_t u = 0;
    for (int k = 0; k < 4; k++) {
      unsigned char h = q[k];
      u = (u << 4) | (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return u;
  }

  static void put_utf8(uint32_t u, std::string* out) {
    if (u < 0x80) {
      out->push_back(static_cast<char>(u));
    } else if (u < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (u >> 6)));
      out->push_back(static_cast<char>(0x80 | (u & 0x3F)));
    } else if (u < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (u >> 12)));
      out->push_back(static_cast<char>(0x80 | ((u >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (u & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (u >> 18)));
      out->push_back(static_cast<char>(0x80 | ((u >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((u >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (u & 0x3F)));
    }
  }

  // Decode a checked string body [q, stop).
  static void decode(const unsigned char* q, const unsigned char* stop, std::string* out) {
    while (q < stop) {
      if (*q != '\\') {
        out->push_back(static_cast<char>(*q++));
        continue;
      }
      unsigned char e = q[1];
      q += 2;
      switch (e) {
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t u = hex_at(q);
          q += 4;
          if (u >= 0xD800 && u <= 0xDBFF) {
            uint32_t lo = hex_at(q + 2);
            q += 6;
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
          }
          put_utf8(u, out);
          break;
        }
        default: out->push_back(static_cast<char>(e));  // " \ /
      }
    }
  }

  const unsigned char* p_;
  const unsigned char* end_;
  std::string* why_;
};

inline int field_of(const char* k, size_t n) {
  switch (n) {
    case 1: return k[0] == 's' ? F_S : -1;
    case 2:
      if (k[0] == 'p' && k[1] == 'h') return F_PH;
      if (k[0] == 't' && k[1] == 's') return F_TS;
      if (k[0] == 'i' && k[1] == 'd') return F_ID;
      if (k[0] == 'b' && k[1] == 'p') return F_BP;
      return -1;
    case 3:
      if (std::memcmp(k, "cat", 3) == 0) return F_CAT;
      if (std::memcmp(k, "pid", 3) == 0) return F_PID;
      if (std::memcmp(k, "tid", 3) == 0) return F_TID;
      if (std::memcmp(k, "dur", 3) == 0) return F_DUR;
      return -1;
    case 4:
      if (std::memcmp(k, "name", 4) == 0) return F_NAME;
      if (std::memcmp(k, "args", 4) == 0) return F_ARGS;
      return -1;
    default: return -1;
  }
}

}  // namespace

bool read_events(const char* buf, size_t len, const std::vector<ArgSpec>& specs, Result* out) {
  Reader rd(buf, len, &out->why);
  std::string scratch, kscratch;
  out->n = 0;
  out->key_order.clear();
  out->ph_x.clear();
  out->why.clear();
  for (Column* c : {&out->cat, &out->name, &out->pid, &out->tid, &out->ts, &out->dur}) c->clear();
  out->args.resize(specs.size());
  for (Column& c : out->args) c.clear();
  Column* numeric[F_COUNT] = {};
  numeric[F_PID] = &out->pid;
  numeric[F_TID] = &out->tid;
  numeric[F_TS] = &out->ts;
  numeric[F_DUR] = &out->dur;
  unsigned seen_any = 0;
  std::vector<uint8_t> arg_seen(specs.size());
  size_t cap = 0;
  try {
    if (len >= (static_cast<size_t>(1) << 32)) rd.fail("a run of events of 4 GiB or more");  // lengths are 32-bit
    rd.ws();
    rd.expect('[');
    rd.ws();
    bool empty = rd.peek() == ']';
    if (empty) rd.fail("no events");
    for (;;) {
      rd.ws();
      if (rd.peek() != '{') rd.fail("an element that is not an object");
      rd.expect('{');
      size_t row = out->n++;
      if (row >= cap) {  // grow every column at once, its new rows filled with "absent"
        cap = cap ? cap * 2 : std::max<size_t>(16, len / 256);
        out->ph_x.resize(cap, 0);
        for (Column* c : {&out->cat, &out->name, &out->pid, &out->tid, &out->ts, &out->dur}) c->resize(cap);
        for (Column& c : out->args) c.resize(cap);
      }
      unsigned seen = 0;
      rd.ws();
      if (rd.peek() == '}') {
        rd.expect('}');
      } else {
        for (;;) {
          rd.ws();
          auto key = rd.string(&kscratch);
          int f = field_of(key.first, key.second);
          if (f < 0) rd.fail("a key other than Kineto's");
          if (seen & (1u << f)) rd.fail("a duplicate key");
          seen |= 1u << f;
          if (!(seen_any & (1u << f))) {
            seen_any |= 1u << f;
            out->key_order.push_back(f);
          }
          rd.ws();
          rd.expect(':');
          rd.ws();
          switch (f) {
            case F_PH: {
              if (rd.peek() != '"') rd.fail("ph is not a string");
              auto s = rd.string(&scratch);
              out->ph_x[row] = s.second == 1 && s.first[0] == 'X';
              break;
            }
            case F_CAT:
            case F_NAME: {
              if (rd.peek() != '"') rd.fail("cat or name is not a string");
              auto s = rd.string(&scratch);
              Column* c = f == F_CAT ? &out->cat : &out->name;
              c->kind[row] = K_STR;
              c->code[row] = c->strs.intern(s.first, s.second);
              break;
            }
            case F_PID:
            case F_TID:
            case F_TS:
            case F_DUR: {
              Column* c = numeric[f];
              unsigned char ch = rd.peek();
              if (ch == '"') {
                if (f == F_TS || f == F_DUR) rd.fail("ts or dur is a string");
                auto s = rd.string(&scratch);
                c->kind[row] = K_STR;
                c->code[row] = c->strs.intern(s.first, s.second);
              } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
                Kind k = rd.number(&c->i64[row], &c->f64[row]);
                if (k == K_FLOAT && (f == F_PID || f == F_TID)) rd.fail("a float pid or tid");
                c->kind[row] = k;
              } else {
                rd.fail("pid, tid, ts or dur of another type");
              }
              break;
            }
            case F_ARGS: {
              if (rd.peek() != '{') rd.fail("args is not an object");
              rd.expect('{');
              std::fill(arg_seen.begin(), arg_seen.end(), 0);
              rd.ws();
              if (rd.peek() == '}') {
                rd.expect('}');
                break;
              }
              for (;;) {
                rd.ws();
                auto ak = rd.string(&kscratch);
                int a = -1;
                for (size_t j = 0; j < specs.size(); j++) {
                  if (specs[j].raw_name.size() == ak.second &&
                      std::memcmp(specs[j].raw_name.data(), ak.first, ak.second) == 0) {
                    a = static_cast<int>(j);
                    break;
                  }
                }
                rd.ws();
                rd.expect(':');
                rd.ws();
                if (a < 0) {
                  rd.value(2);
                } else {
                  if (arg_seen[a]) rd.fail("a duplicate arg");
                  arg_seen[a] = 1;
                  Column& c = out->args[a];
                  const unsigned char* start = rd.pos();
                  unsigned char ch = rd.peek();
                  Kind k;
                  if (specs[a].object) {
                    rd.value(2);
                    k = K_TEXT;
                  } else if (ch == '"') {
                    auto s = rd.string(&scratch);
                    c.code[row] = c.strs.intern(s.first, s.second);
                    k = K_STR;
                  } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
                    k = rd.number(&c.i64[row], &c.f64[row]);
                  } else {
                    k = rd.value(2);
                  }
                  if (k == K_TEXT) {
                    c.code[row] = c.texts.intern(reinterpret_cast<const char*>(start), rd.pos() - start);
                  }
                  c.kind[row] = k;
                }
                rd.ws();
                unsigned char c2 = rd.peek();
                rd.expect(c2);
                if (c2 == '}') break;
                if (c2 != ',') rd.fail("expected , or } in args");
              }
              break;
            }
            default:  // id, bp, s: checked, not kept
              rd.value(1);
          }
          rd.ws();
          unsigned char c = rd.peek();
          rd.expect(c);
          if (c == '}') break;
          if (c != ',') rd.fail("expected , or } in an event");
        }
      }
      rd.ws();
      unsigned char c = rd.peek();
      rd.expect(c);
      if (c == ']') break;
      if (c != ',') rd.fail("expected , or ] between events");
    }
    rd.ws();
    if (!rd.at_end()) rd.fail("bytes after the array");
    out->ph_x.resize(out->n);
    for (Column* c : {&out->cat, &out->name, &out->pid, &out->tid, &out->ts, &out->dur}) c->resize(out->n);
    for (Column& c : out->args) c.resize(out->n);
  } catch (const Reject&) {
    return false;
  } catch (const std::bad_alloc&) {
    out->why = "out of memory";
    return false;
  }
  return true;
}

}  // namespace hta_native
