#include "xml.h"

#include <expat.h>

#include <string>

namespace tightpipe::testutil {

std::string XmlElement::attr(const std::string& key) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? "" : it->second;
}

std::vector<const XmlElement*> XmlParse::with_class(const std::string& cls) const {
  std::vector<const XmlElement*> out;
  for (const auto& e : elements)
    if (e.attr("class") == cls) out.push_back(&e);
  return out;
}

std::vector<const XmlElement*> XmlParse::children(const XmlElement* parent,
                                                  const std::string& name) const {
  std::vector<const XmlElement*> out;
  const int pi = static_cast<int>(parent - elements.data());
  for (const auto& e : elements)
    if (e.parent == pi && e.name == name) out.push_back(&e);
  return out;
}

void parse_xml(const std::string& xml, XmlParse& out) {
  out.open.clear();
  XML_Parser parser = XML_ParserCreate("UTF-8");
  XML_SetUserData(parser, &out);
  XML_SetElementHandler(
      parser,
      [](void* ud, const XML_Char* name, const XML_Char** attrs) {
        auto* s = static_cast<XmlParse*>(ud);
        XmlElement e;
        e.name = name;
        e.parent = s->open.empty() ? -1 : s->open.back();
        for (int i = 0; attrs[i]; i += 2) e.attrs[attrs[i]] = attrs[i + 1];
        s->open.push_back(static_cast<int>(s->elements.size()));
        s->elements.push_back(std::move(e));
      },
      [](void* ud, const XML_Char*) { static_cast<XmlParse*>(ud)->open.pop_back(); });
  XML_SetCharacterDataHandler(parser, [](void* ud, const XML_Char* text, int len) {
    auto* s = static_cast<XmlParse*>(ud);
    if (!s->open.empty()) s->elements[s->open.back()].text.append(text, len);
  });
  if (XML_Parse(parser, xml.data(), static_cast<int>(xml.size()), 1) != XML_STATUS_OK && out.ok) {
    out.ok = false;
    out.error = std::string(XML_ErrorString(XML_GetErrorCode(parser))) + " at line " +
                std::to_string(XML_GetCurrentLineNumber(parser));
  }
  XML_ParserFree(parser);
}

}  // namespace tightpipe::testutil
