"""The text fields of a multipart/form-data body, files left out: what a
proxy needs to route an upload (its model, whether it streams) without
holding a second copy of the file."""

from __future__ import annotations

from python_multipart.multipart import MultipartParser, parse_options_header

MAX_FIELD = 64 * 1024  # a routing field is short; a longer one is skipped, not kept


def is_form(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower() == "multipart/form-data"


def form_fields(body: bytes, content_type: str) -> dict[str, str]:
    """Each text field's value (the last one of a repeated name). A body that
    is not valid multipart gives what was read before the fault: the worker
    that gets it says what is wrong."""
    _, params = parse_options_header(content_type)
    boundary = params.get(b"boundary")
    if not boundary:
        return {}
    fields: dict[str, str] = {}
    part: dict = {}
    header: list[bytes] = [b"", b""]

    def on_part_begin():
        part.clear()
        part.update(name=None, file=False, data=bytearray())

    def on_header_field(data, start, end):
        header[0] += data[start:end]

    def on_header_value(data, start, end):
        header[1] += data[start:end]

    def on_header_end():
        if header[0].lower() == b"content-disposition":
            _, options = parse_options_header(header[1])
            part["name"] = options.get(b"name", b"").decode("utf-8", "replace")
            part["file"] = b"filename" in options
        header[0], header[1] = b"", b""

    def on_part_data(data, start, end):
        if not part["file"] and len(part["data"]) <= MAX_FIELD:
            part["data"] += data[start:end]

    def on_part_end():
        if part.get("name") and not part["file"] and len(part["data"]) <= MAX_FIELD:
            fields[part["name"]] = part["data"].decode("utf-8", "replace")

    parser = MultipartParser(boundary, {
        "on_part_begin": on_part_begin, "on_header_field": on_header_field, "on_header_value": on_header_value,
        "on_header_end": on_header_end, "on_part_data": on_part_data, "on_part_end": on_part_end,
    })
    try:
        parser.write(body)
        parser.finalize()
    except ValueError:  # python-multipart's parse errors are ValueErrors; the worker answers the 400
        pass
    return fields
