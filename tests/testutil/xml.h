// Test helper for the pages tightpipe writes (plan.html, report.html): a piece of a page (an
// <svg> plot, a page's <body>) parsed as XML by expat into a flat list of elements, so that a
// test can check it is well-formed and read back what it shows (attributes, unescaped text).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace tightpipe::testutil {

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;  // character data directly inside it, unescaped
  int parent = -1;   // index into XmlParse::elements; -1 for a document's root
  // The attribute's value, "" when absent.
  std::string attr(const std::string& key) const;
};

struct XmlParse {
  bool ok = true;
  std::string error;                 // the first parse error, with its line
  std::vector<XmlElement> elements;  // in document order, over every parse_xml call
  std::vector<int> open;             // while parsing: the open elements

  // The elements whose class attribute is exactly `cls`.
  std::vector<const XmlElement*> with_class(const std::string& cls) const;
  // The children of `parent` named `name`, in order.
  std::vector<const XmlElement*> children(const XmlElement* parent, const std::string& name) const;
};

// Parses `xml`, one well-formed document, appending its elements to `out`; on an error sets
// out.ok = false and out.error (and keeps what was parsed).
void parse_xml(const std::string& xml, XmlParse& out);

}  // namespace tightpipe::testutil
