// Markdown and HTML printers for Document and Table (see markup.h).
#include "reports/common/markup.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace sweep::reports {
namespace {

// Characters that Markdown would read as formatting in running text or a table cell.
std::string md_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += ' ';
      continue;
    }
    if (std::string_view("\\`*_[]<>|#").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// "Same in every row: optimizer adamw, accumulation 1."; empty when nothing was hidden.
std::string fixed_sentence(const Table& t) {
  std::string out;
  for (const auto& [header, value] : t.fixed) {
    if (value.empty()) continue;
    out += (out.empty() ? "Same in every row: " : ", ") + header + " " + value;
  }
  return out.empty() ? out : out + ".";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

constexpr const char* kStyle =
    "body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;"
    "color:#222}table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;"
    "padding:.2em .6em}th{background:#f3f3f3}td.r{text-align:right;"
    "font-variant-numeric:tabular-nums}img{max-width:100%}p.fixed{color:#555;"
    "font-size:.9em}section#summary{border:2px solid #0072b2;border-radius:6px;padding:0 1em;"
    "margin-bottom:1.5em}details{margin:.5em 0}summary{cursor:pointer;font-weight:600}";

}  // namespace

Table make_table(std::vector<std::string> headers, std::vector<Align> align,
                 const std::vector<bool>& keep, std::vector<std::vector<std::string>> rows) {
  Table t;
  std::vector<bool> shown(headers.size(), true);
  for (std::size_t c = 0; c < headers.size(); ++c) {
    if (keep[c] || rows.empty()) continue;
    bool varies = false;
    for (const auto& r : rows) varies = varies || r[c] != rows.front()[c];
    if (varies) continue;
    shown[c] = false;
    t.fixed.emplace_back(headers[c], rows.front()[c]);
  }
  for (std::size_t c = 0; c < headers.size(); ++c) {
    if (!shown[c]) continue;
    t.headers.push_back(headers[c]);
    t.align.push_back(align[c]);
  }
  for (auto& r : rows) {
    auto& out = t.rows.emplace_back();
    for (std::size_t c = 0; c < r.size(); ++c)
      if (shown[c]) out.push_back(std::move(r[c]));
  }
  return t;
}

std::string markdown_table(const Table& t) {
  std::string out;
  if (t.headers.empty()) return out;
  auto line = [&](const std::vector<std::string>& cells) {
    out += "|";
    for (const auto& c : cells) out += " " + md_escape(c) + " |";
    out += "\n";
  };
  line(t.headers);
  out += "|";
  for (Align a : t.align) out += a == Align::kRight ? " ---: |" : " --- |";
  out += "\n";
  for (const auto& r : t.rows) line(r);
  if (std::string fixed = fixed_sentence(t); !fixed.empty()) out += "\n" + md_escape(fixed) + "\n";
  return out;
}

std::string html_table(const Table& t) {
  std::string out;
  if (t.headers.empty()) return out;
  out += "<table>\n<tr>";
  for (const auto& h : t.headers) out += "<th>" + html_escape(h) + "</th>";
  out += "</tr>\n";
  for (const auto& r : t.rows) {
    out += "<tr>";
    for (std::size_t c = 0; c < r.size(); ++c)
      out +=
          (t.align[c] == Align::kRight ? "<td class=\"r\">" : "<td>") + html_escape(r[c]) + "</td>";
    out += "</tr>\n";
  }
  out += "</table>\n";
  if (std::string fixed = fixed_sentence(t); !fixed.empty())
    out += "<p class=\"fixed\">" + html_escape(fixed) + "</p>\n";
  return out;
}

std::string base64(const std::string& bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) |
                 (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                 static_cast<unsigned char>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (std::size_t rest = bytes.size() - i; rest > 0) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (rest == 2) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

void Document::heading(int level, std::string text) {
  blocks_.push_back({.kind = Kind::kHeading, .level = level, .text = {std::move(text)}});
}
void Document::paragraph(std::string text) {
  blocks_.push_back({.kind = Kind::kParagraph, .text = {std::move(text)}});
}
void Document::code(std::string language, std::string text) {
  blocks_.push_back({.kind = Kind::kCode, .text = {std::move(language), std::move(text)}});
}
void Document::list(std::vector<std::string> items) {
  blocks_.push_back({.kind = Kind::kList, .text = std::move(items)});
}
void Document::table(Table table) {
  blocks_.push_back({.kind = Kind::kTable, .table = std::move(table)});
}
void Document::image(Image image) {
  blocks_.push_back({.kind = Kind::kImage, .image = std::move(image)});
}

void Document::begin_details(std::string summary) {
  open_.push_back(Kind::kDetails);
  blocks_.push_back({.kind = Kind::kDetails, .text = {std::move(summary)}});
}
void Document::begin_section(std::string id) {
  open_.push_back(Kind::kSection);
  blocks_.push_back({.kind = Kind::kSection, .text = {std::move(id)}});
}
void Document::end() {
  if (open_.empty()) throw std::logic_error("Document::end without a begin");
  blocks_.push_back({.kind = Kind::kEnd, .level = static_cast<int>(open_.back())});
  open_.pop_back();
}

std::string Document::markdown() const {
  std::string out;
  for (const Block& b : blocks_) {
    switch (b.kind) {
      case Kind::kHeading:
        out += std::string(b.level, '#') + " " + md_escape(b.text[0]);
        break;
      case Kind::kParagraph:
        out += md_escape(b.text[0]);
        break;
      case Kind::kList:
        for (const auto& item : b.text) out += "- " + md_escape(item) + "\n";
        break;
      case Kind::kTable:
        out += markdown_table(b.table);
        break;
      case Kind::kImage:
        out += "![" + md_escape(b.image.alt) + "](" + b.image.stem + ".svg)";
        break;
      case Kind::kCode:
        out += "```" + b.text[0] + "\n" + b.text[1] + (b.text[1].ends_with('\n') ? "" : "\n") + "```";
        break;
      case Kind::kDetails:
        out += "<details><summary>" + html_escape(b.text[0]) + "</summary>";
        break;
      case Kind::kSection:
        continue;
      case Kind::kEnd:
        if (static_cast<Kind>(b.level) == Kind::kSection) continue;
        out += "</details>";
        break;
    }
    if (!out.empty() && out.back() != '\n') out += "\n";
    out += "\n";
  }
  return out;
}

std::string Document::html(const std::string& title, const std::string& image_dir) const {
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
      html_escape(title) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  for (const Block& b : blocks_) {
    switch (b.kind) {
      case Kind::kHeading: {
        std::string tag = "h" + std::to_string(b.level);
        out += "<" + tag + ">" + html_escape(b.text[0]) + "</" + tag + ">\n";
        break;
      }
      case Kind::kParagraph:
        out += "<p>" + html_escape(b.text[0]) + "</p>\n";
        break;
      case Kind::kList:
        out += "<ul>\n";
        for (const auto& item : b.text) out += "<li>" + html_escape(item) + "</li>\n";
        out += "</ul>\n";
        break;
      case Kind::kTable:
        out += html_table(b.table);
        break;
      case Kind::kImage: {
        // PNG rather than inline SVG: gnuplot's SVG carries xmlns URLs, and a data URI
        // keeps the file free of any address.
        auto png = std::filesystem::path(image_dir) / (b.image.stem + ".png");
        out += "<p><img alt=\"" + html_escape(b.image.alt) + "\" src=\"data:image/png;base64," +
               base64(read_file(png.string())) + "\"></p>\n";
        break;
      }
      case Kind::kCode:
        out += "<pre><code>" + html_escape(b.text[1]) + "</code></pre>\n";
        break;
      case Kind::kDetails:
        out += "<details><summary>" + html_escape(b.text[0]) + "</summary>\n";
        break;
      case Kind::kSection:
        out += "<section id=\"" + html_escape(b.text[0]) + "\">\n";
        break;
      case Kind::kEnd:
        out += static_cast<Kind>(b.level) == Kind::kSection ? "</section>\n" : "</details>\n";
        break;
    }
  }
  return out + "</body>\n</html>\n";
}

}  // namespace sweep::reports
