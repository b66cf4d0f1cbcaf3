#pragma once
// Deck options that take one word of a fixed list (train.precision = "bf16"), held as the enum the
// code switches on: the word is checked once, when the deck is read (core/input_deck.cpp), and
// nothing compares option strings after that. An enum E becomes a choice by naming its words, in
// its own order, next to its definition:
//   template <> struct Words<Precision> { static inline const WordList list{"fp32", "bf16", "fp16"}; };
// Words "true" and "false" are also what a TOML boolean reads as (checkpoint.resume = true).
#include <ostream>
#include <string>
#include <vector>

namespace gpt2 {

using WordList = std::vector<const char*>;

template <class E>
struct Words;  // specialised next to each enum: static const WordList list

// An enum value's word, e.g. word(Precision::bf16) == "bf16".
template <class E>
const char* word(E e) {
  return Words<E>::list[size_t(e)];
}

// The position of `w` in `words`, or -1.
inline int word_index(const WordList& words, const std::string& w) {
  for (size_t i = 0; i < words.size(); ++i)
    if (w == words[i]) return int(i);
  return -1;
}

// `s` as an E if it is one of E's words; false (and `out` unchanged) if not.
template <class E>
bool parse_word(const std::string& s, E& out) {
  const int i = word_index(Words<E>::list, s);
  if (i >= 0) out = E(i);
  return i >= 0;
}

// A TOML boolean's word: "true" or "false".
inline bool is_bool_word(const std::string& w) { return w == "true" || w == "false"; }

// A switch that also has an automatic setting: true | false | "auto" (train.tf32, checkpoint.resume).
enum class Toggle { on, off, automatic };
template <>
struct Words<Toggle> {
  static inline const WordList list{"true", "false", "auto"};
};

// What the deck binds: a choice seen through its position in its word list.
class Word {
 public:
  const WordList& words() const { return *words_; }
  const char* text() const { return (*words_)[size_t(index_)]; }
  // Takes `w` if it is one of the words; false (and unchanged) if not.
  bool assign(const std::string& w) {
    const int i = word_index(*words_, w);
    if (i >= 0) index_ = i;
    return i >= 0;
  }
  bool has_word(const char* w) const { return word_index(*words_, w) >= 0; }

 protected:
  Word(const WordList* words, int index) : words_(words), index_(index) {}
  const WordList* words_;
  int index_;
};

// A member of a deck section: Choice<Precision> precision = Precision::fp32; reads as a Precision.
template <class E>
class Choice : public Word {
 public:
  Choice(E e = E{}) : Word(&Words<E>::list, int(e)) {}  // NOLINT: a choice is its value
  Choice& operator=(E e) { return index_ = int(e), *this; }
  operator E() const { return E(index_); }  // NOLINT
  E value() const { return E(index_); }
};

template <class E>
const char* word(const Choice<E>& c) {
  return c.text();
}
inline std::ostream& operator<<(std::ostream& os, const Word& w) { return os << w.text(); }

}  // namespace gpt2
